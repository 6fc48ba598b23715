// The block drafter's fixture (tests/fixtures/dspark_tiny, tools/make_dspark_fixture.py): a
// DSpark-layout drafter on a tiny V4 with random weights, and its HF-transformers reference's
// blocks at a few anchors of one token sequence (block_drafter_test, cuda_block_drafter_test).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include "golden.h"
#include "model/mapped_file.h"
#include "model/safetensors.h"

namespace peregrine::deepseek_v4::drafter_test {

inline std::filesystem::path FixtureDir() { return testing::SourceRoot() / "tests" / "fixtures" / "dspark_tiny"; }

struct DrafterGolden {
  std::vector<int32_t> tokens, anchors, block_tokens;
  std::vector<float> block_logits, confidence;  // [A, B, V], [A, B]
  int64_t block = 0, vocab = 0;

  // Row a * block + i of block_logits (anchor a, block position i) and its log-normaliser.
  const float* Logits(size_t row) const { return block_logits.data() + row * static_cast<size_t>(vocab); }
  double LogZ(size_t row) const {
    const float* ref = Logits(row);
    const auto v = static_cast<size_t>(vocab);
    const double mx = *std::max_element(ref, ref + v);
    double sum = 0.0;
    for (size_t k = 0; k < v; ++k) sum += std::exp(static_cast<double>(ref[k]) - mx);
    return mx + std::log(sum);
  }
};

inline Result<DrafterGolden> ReadDrafterGolden() {
  const std::filesystem::path file = FixtureDir() / "drafter_golden.safetensors";
  PG_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(file));
  PG_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensors(mapped.bytes(), file.string()));
  DrafterGolden g;
  for (const SafetensorsEntry& e : header.entries) {
    const uint8_t* p = mapped.bytes().data() + e.offset;
    const int64_t n = e.shape.numel();
    if (e.dtype == DType::kI64) {
      std::vector<int32_t> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        int64_t x;
        std::memcpy(&x, p + i * 8, 8);
        v[static_cast<size_t>(i)] = static_cast<int32_t>(x);
      }
      if (e.name == "tokens") g.tokens = std::move(v);
      if (e.name == "anchors") g.anchors = std::move(v);
      if (e.name == "block_tokens") g.block_tokens = std::move(v);
    } else if (e.dtype == DType::kF32) {
      std::vector<float> v(static_cast<size_t>(n));
      std::memcpy(v.data(), p, static_cast<size_t>(n) * 4);
      if (e.name == "block_logits") {
        g.block = e.shape[1];
        g.vocab = e.shape[2];
        g.block_logits = std::move(v);
      }
      if (e.name == "confidence") g.confidence = std::move(v);
    }
  }
  if (g.tokens.empty() || g.anchors.empty() || g.block_logits.empty() || g.confidence.empty())
    return DataLoss(file.string() + ": a tensor is missing");
  return g;
}

}  // namespace peregrine::deepseek_v4::drafter_test
