// Synthetic requests: random prompts of common words (no dataset download), seeded random
// lengths, and the seeded Poisson arrival schedule of an open-loop run.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"

namespace peregrine::bench_client {

// A seeded generator whose draws are the same with every standard library: mt19937_64's output
// sequence is fixed by the standard, and the conversions below are ours, not <random>'s.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  double NextUniform();                      // [0, 1)
  int64_t NextInt(int64_t lo, int64_t hi);   // [lo, hi]; requires lo <= hi
  double NextExponential(double rate);       // mean 1/rate; requires rate > 0

 private:
  std::mt19937_64 engine_;
};

struct WorkloadOptions {
  int num_prompts = 100;
  int input_len = 1024;     // words per prompt; a common word is about one token
  int output_len = 128;     // max_tokens per request
  double range_ratio = 0;   // each length uniform in [len·(1−r), len·(1+r)]; 0 keeps it fixed
  int prefix_len = 0;       // words of one random prefix every prompt starts with (a shared system prompt)
  uint64_t seed = 0;
};

struct PromptSpec {
  std::string prompt;
  int input_len = 0;   // words in `prompt` (the shared prefix included)
  int output_len = 0;  // max_tokens to ask for
};

// Fails with kInvalidArgument when a count is not positive or range_ratio is outside [0, 1).
Status ValidateWorkload(const WorkloadOptions& options);

// `num_prompts` prompts, identical for equal options. Past the shared prefix (prefix_len
// words, the same for every prompt), distinct prompts differ from their first word, so a
// prefix cache shares exactly the prefix between them.
Result<std::vector<PromptSpec>> MakeRandomWorkload(const WorkloadOptions& options);

// Arrival offsets in seconds from the start of an open-loop run: the first at 0, each later one
// an exponential gap with mean 1/rate after the previous, so arrivals form a Poisson process of
// `rate` per second. A rate of +infinity puts every arrival at 0. Requires rate > 0.
std::vector<double> PoissonArrivalOffsets(int num_arrivals, double rate, uint64_t seed);

}  // namespace peregrine::bench_client
