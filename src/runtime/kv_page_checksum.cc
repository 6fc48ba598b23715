#include "runtime/kv_page_checksum.h"

#include <cstring>

#include "base/check.h"

namespace peregrine {

uint64_t KvPageChecksum(std::span<const uint8_t> bytes, uint64_t first_word) {
  PG_CHECK(bytes.size() % 8 == 0, "a KV page checksum covers whole 64-bit words");
  uint64_t sum = 0;
  for (size_t at = 0, i = first_word; at < bytes.size(); at += 8, ++i) {
    uint64_t w = 0;
    std::memcpy(&w, bytes.data() + at, 8);  // little-endian hosts only (as the device)
    sum += KvChecksumMix(w + (i + 1) * kKvChecksumStep);
  }
  return sum;
}

}  // namespace peregrine
