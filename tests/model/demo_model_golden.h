// tests/model/demo_model_golden.json (tools/make_demo_model_golden.py): HF transformers' float32
// run of the committed demo model, for its CPU and GPU parity tests.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "base/status.h"

namespace peregrine::testing {

struct DemoGreedyStep {
  int32_t token = 0;
  std::vector<int32_t> top_ids;    // the step's 32 largest logits, largest first
  std::vector<double> top_logits;
  double lse = 0.0;                // log-sum-exp of the step's logits
};

struct DemoGolden {
  std::vector<int32_t> prompt_ids;
  std::vector<DemoGreedyStep> greedy;
  // Teacher-forced rows: per row and position, HF's argmax and the next token's raw logprob.
  std::vector<std::vector<int32_t>> rows;
  std::vector<std::vector<int32_t>> argmax;
  std::vector<std::vector<double>> target_logprob;
  // The MTP block over mtp_tokens: per position t (predicting t + 2) its argmax, 8 largest
  // logits and log-sum-exp.
  std::vector<int32_t> mtp_tokens;
  std::vector<int32_t> mtp_argmax;
  std::vector<std::vector<int32_t>> mtp_top_ids;
  std::vector<std::vector<double>> mtp_top_logits;
  std::vector<double> mtp_lse;
};

Result<DemoGolden> ReadDemoGolden();
// models/deepseek-v4-demo in the source tree.
std::filesystem::path DemoModelDir();

}  // namespace peregrine::testing
