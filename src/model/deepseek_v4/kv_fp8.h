// DeepSeek-V4's FP8 KV row (deepseek-v4.md section 2.6, FlashMLA's "MODEL1" layout): of a
// D-wide cache row (window row or compressed entry; RoPE on the last R dims), the first D - R
// values as e4m3 in blocks of 64, each block with a power-of-two (UE8M0) scale
//   scale = 2^ceil(log2(max(amax, 1e-4) / 448)),
// and the R RoPE values as bf16: 448 + 7 + 128 = 583 bytes for V4's 512-wide rows, against 1024
// in bf16. It is the format the model was trained with (quantised and dequantised in place), so
// a cache in it reproduces training's numerics; against this project's float reference (which,
// like HF transformers, keeps the rows unquantised) it is an approximation, measured on the demo
// model by kv_fp8_test.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace peregrine::deepseek_v4 {

inline constexpr int64_t kKvFp8Block = 64;  // values per UE8M0 scale

struct KvFp8Row {
  std::vector<uint8_t> nope;    // [D - R] e4m3
  std::vector<uint8_t> scales;  // [ceil((D - R) / 64)] UE8M0, the last block possibly partial
  std::vector<uint16_t> rope;   // [R] bf16
};

// Bytes of one stored row: e4m3 values, scales and bf16 RoPE values.
int64_t KvFp8RowBytes(int64_t dim, int64_t rope_dim);

// Requires 0 <= rope_dim <= row.size(); NaN values stay NaN, infinities saturate to the block's
// largest code.
KvFp8Row QuantizeKvRow(std::span<const float> row, int64_t rope_dim);
// Requires `row` to be as wide as the quantised row.
void DequantizeKvRow(const KvFp8Row& q, std::span<float> row);
// What an FP8 cache gives back for `row`, written over it (Quantize then Dequantize).
void RoundTripKvRow(std::span<float> row, int64_t rope_dim);

}  // namespace peregrine::deepseek_v4
