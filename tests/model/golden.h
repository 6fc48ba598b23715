// Reads a fixture's golden.safetensors (written by tools/make_v4_fixtures.py).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "base/status.h"

namespace peregrine::testing {

struct Golden {
  int64_t vocab = 0;
  std::vector<int32_t> prompt_ids;     // [T]
  std::vector<float> full_logits;      // [T, V]
  std::vector<int32_t> generated_ids;  // [N]
  std::vector<float> step_logits;      // [N, V]
};

Result<Golden> ReadGolden(const std::filesystem::path& file);

// ||a - b|| / ||b|| over n values.
double RelativeL2(const float* a, const float* b, int64_t n);
int64_t ArgMax(const float* x, int64_t n);

// The source tree (PEREGRINE_SOURCE_DIR from the environment, else the one built from).
std::filesystem::path SourceRoot();

// The fixture directories under tests/fixtures (each has model/ and golden.safetensors).
std::vector<std::filesystem::path> FixtureDirs();
// Those made with bf16 margins (meta.json "bf16_margins": true; docs/decisions/0002).
std::vector<std::filesystem::path> Bf16FixtureDirs();

}  // namespace peregrine::testing
