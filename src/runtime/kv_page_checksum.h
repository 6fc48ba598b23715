// The checksum of a KV page that crosses between processes on one GPU (CUDA IPC,
// kernels/kv_copy.cuh computes it on the device while copying). The page is read as
// little-endian 64-bit words w_0 .. w_{n-1}; the checksum is
//   sum over i of Mix(w_i + (i + 1) * 0x9E3779B97F4A7C15)  (mod 2^64)
// with Mix the bijective 64-bit finaliser of MurmurHash3. Each term depends on the word and
// its index, so a changed or moved word changes its term (Mix is a bijection); the sum lets
// any split of the page into pieces be checksummed in parallel and added up. It detects
// corruption, not forgery: the meta that carries it is signed (disaggregation/transfer_wire.h).
#pragma once

#include <cstdint>
#include <span>

namespace peregrine {

inline constexpr uint64_t kKvChecksumStep = 0x9E3779B97F4A7C15ull;

constexpr uint64_t KvChecksumMix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// The checksum's terms for `bytes` (a multiple of 8) taken as words first_word, first_word+1, ...
// of a page: a page's checksum is the sum of its pieces' (KvPageChecksum(page) ==
// KvPageChecksum(head, 0) + KvPageChecksum(tail, head.size() / 8)).
uint64_t KvPageChecksum(std::span<const uint8_t> bytes, uint64_t first_word = 0);

}  // namespace peregrine
