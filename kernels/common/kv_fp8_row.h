// DeepSeek-V4's FP8 KV row on the device (docs: src/model/deepseek_v4/kv_fp8.h, the format;
// deepseek-v4.md section 2.6): of a `dim`-wide row with RoPE on its last `rope_dim` values,
// the first dim - rope_dim values as e4m3 in blocks of 64, each block with a UE8M0 scale
//   scale = 2^ceil(log2(max(amax, 1e-4) / 448)),
// and the RoPE values as bf16. Stored row, each part starting 16-byte aligned so a row is
// read in 16-byte pieces:
//   [nope e4m3, padded to 16][rope bf16, padded to 16][block scales, padded to 16]
// (V4's 512-wide rows: 448 + 128 + 16 = 592 bytes against 1,024 in bf16).
//
// The value functions use integer and exactly rounded float operations only, so host and
// device give the same bytes; tests/kernels/kv_fp8_row_test.cc checks them against the host
// model's QuantizeKvRow bit for bit. Plain C++ (no CUDA headers): host code includes it.
#pragma once

#include <cstdint>
#include <cstring>
#include <cmath>

#include "kernels/common/host_device.h"

namespace peregrine::kernels {

inline constexpr int kKvFp8Block = 64;  // values per UE8M0 scale

PG_HOST_DEVICE constexpr int KvFp8Align16(int bytes) { return (bytes + 15) / 16 * 16; }

struct KvFp8RowLayout {
  int dim = 0;
  int rope_dim = 0;

  PG_HOST_DEVICE constexpr int nope() const { return dim - rope_dim; }
  PG_HOST_DEVICE constexpr int blocks() const { return (nope() + kKvFp8Block - 1) / kKvFp8Block; }
  PG_HOST_DEVICE constexpr int rope_offset() const { return KvFp8Align16(nope()); }
  PG_HOST_DEVICE constexpr int scale_offset() const { return rope_offset() + KvFp8Align16(2 * rope_dim); }
  PG_HOST_DEVICE constexpr int row_bytes() const { return scale_offset() + KvFp8Align16(blocks()); }
};

PG_HOST_DEVICE inline uint32_t KvFp8FloatBits(float v) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(v);
#else
  uint32_t u = 0;
  std::memcpy(&u, &v, sizeof u);
  return u;
#endif
}

PG_HOST_DEVICE inline float KvFp8BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float v = 0.0f;
  std::memcpy(&v, &u, sizeof v);
  return v;
#endif
}

// The UE8M0 code of a block's scale from its largest magnitude (NaN values left out of it;
// an infinite one counts as 448): 127 + ceil(log2(max(amax, 1e-4) / 448)).
PG_HOST_DEVICE inline uint8_t KvFp8ScaleCode(float amax) {
  if (KvFp8FloatBits(amax) == 0x7f800000u) amax = 448.0f;  // infinity (NaN never reaches here: amax skips it)
  const float x = (amax > 1e-4f ? amax : 1e-4f) / 448.0f;  // a normal float, exactly rounded
  const uint32_t bits = KvFp8FloatBits(x);
  const int exponent = static_cast<int>(bits >> 23) - 127;
  return static_cast<uint8_t>(127 + ((bits & 0x7fffffu) == 0 ? exponent : exponent + 1));
}

// 2^(code - 127) and its inverse, exact for the codes KvFp8ScaleCode makes (105 to 247); the
// extremes 0 and 254 of UE8M0, which no row carries, come out as 0.
PG_HOST_DEVICE inline float KvFp8Scale(uint8_t code) { return KvFp8BitsFloat(static_cast<uint32_t>(code) << 23); }
PG_HOST_DEVICE inline float KvFp8InverseScale(uint8_t code) {
  return KvFp8BitsFloat(static_cast<uint32_t>(254 - code) << 23);
}

// e4m3 "fn" with round-to-nearest-even, saturating at 448; NaN becomes 0x7f.
PG_HOST_DEVICE inline uint8_t KvFp8EncodeE4M3(float v) {
  const uint32_t bits = KvFp8FloatBits(v);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return 0x7f;
  if (magnitude >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7e);  // >= 448
  if (magnitude < 0x3c800000u) {  // below 2^-6: multiples of 2^-9
    const float q = rintf(KvFp8BitsFloat(magnitude) * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint8_t>(q));
  }
  int exponent = static_cast<int>(magnitude >> 23) - 127;
  uint32_t mantissa = (magnitude & 0x7fffffu) >> 20;
  const uint32_t rest = magnitude & 0xfffffu;
  if (rest > 0x80000u || (rest == 0x80000u && (mantissa & 1u) != 0)) ++mantissa;
  if (mantissa == 8) {
    mantissa = 0;
    ++exponent;
  }
  return static_cast<uint8_t>(sign | ((exponent + 7) << 3) | mantissa);
}

PG_HOST_DEVICE inline float KvFp8DecodeE4M3(uint8_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x80u) << 24;
  const uint32_t exponent = (v >> 3) & 0xfu;
  const uint32_t mantissa = v & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return KvFp8BitsFloat(0x7fc00000u);
  if (exponent == 0) {
    const float f = static_cast<float>(mantissa) * (1.0f / 512.0f);
    return KvFp8BitsFloat(KvFp8FloatBits(f) | sign);
  }
  return KvFp8BitsFloat(sign | ((exponent - 7 + 127) << 23) | (mantissa << 20));
}

// bf16 with round-to-nearest-even (NaN kept quiet), as raw bits.
PG_HOST_DEVICE inline uint16_t KvFp8EncodeBF16(float v) {
  const uint32_t bits = KvFp8FloatBits(v);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

// A whole row into `out` (layout.row_bytes() bytes; padding zeroed), on one thread: the host
// reference of what the kernels write cooperatively.
inline void KvFp8EncodeRow(const float* row, const KvFp8RowLayout& layout, uint8_t* out) {
  std::memset(out, 0, static_cast<size_t>(layout.row_bytes()));
  const int nope = layout.nope();
  for (int b = 0; b < layout.blocks(); ++b) {
    const int begin = b * kKvFp8Block;
    const int end = begin + kKvFp8Block < nope ? begin + kKvFp8Block : nope;
    float amax = 0.0f;
    for (int i = begin; i < end; ++i)
      if (!std::isnan(row[i])) amax = std::fabs(row[i]) > amax ? std::fabs(row[i]) : amax;
    const uint8_t code = KvFp8ScaleCode(amax);
    out[layout.scale_offset() + b] = code;
    const float inverse = KvFp8InverseScale(code);
    for (int i = begin; i < end; ++i) out[i] = KvFp8EncodeE4M3(row[i] * inverse);
  }
  for (int i = 0; i < layout.rope_dim; ++i) {
    const uint16_t v = KvFp8EncodeBF16(row[nope + i]);
    std::memcpy(out + layout.rope_offset() + 2 * i, &v, sizeof v);
  }
}

// A stored row back to floats (`row`: layout.dim values).
inline void KvFp8DecodeRow(const uint8_t* in, const KvFp8RowLayout& layout, float* row) {
  const int nope = layout.nope();
  for (int i = 0; i < nope; ++i)
    row[i] = KvFp8DecodeE4M3(in[i]) * KvFp8Scale(in[layout.scale_offset() + i / kKvFp8Block]);
  for (int i = 0; i < layout.rope_dim; ++i) {
    uint16_t v = 0;
    std::memcpy(&v, in + layout.rope_offset() + 2 * i, sizeof v);
    row[nope + i] = KvFp8BitsFloat(static_cast<uint32_t>(v) << 16);
  }
}

}  // namespace peregrine::kernels
