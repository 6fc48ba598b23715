// Sampling on the device: logit edits, greedy argmax, or one draw from the temperature
// distribution truncated by top-k -> top-p -> min-p, plus raw logprobs. Matches the host sampler
// (src/sampling) token for token: the same exponential, the same tie rules, the same summation
// orders. The host keeps each request's state and passes, per row, the parameters, the one
// uniform draw u the host sampler would make and a sorted list of edits (bench/sampling_gpu/NOTES.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

// What an edit does to the logit of its token (the order of src/sampling/logits_processors.cc).
enum class SamplingEditOp : int32_t {
  kAdd = 0,         // logit = logit + float(value)            (logit_bias)
  kRepetition = 1,  // logit = logit > 0 ? logit / p : logit * p, p = float(value)
  kSubtract = 2,    // logit = float(double(logit) - value)    (presence + frequency * count)
};

struct SamplingEdit {
  int32_t token = 0;
  int32_t op = 0;  // SamplingEditOp
  double value = 0.0;
};

// One row's settings. Off values: top_k <= 0 or >= vocab, top_p >= 1, min_p <= 0.
struct SamplingRow {
  float temperature = 0.0f;      // !(temperature > 0): greedy (no draw)
  float inv_temperature = 0.0f;  // InverseTemperature(temperature) (src/sampling/weights.h)
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  int32_t num_top_logprobs = -1;  // -1: no logprobs; 0..kSamplingMaxTopLogprobs
  double u = 0.0;                 // the draw in [0, 1); unused when greedy
};

inline constexpr int kSamplingMaxTopLogprobs = 20;
// Truncated rows keep their candidates in shared memory; a row needing more (a near-flat
// distribution, or ties at the k-th logit) is not sampled and reports kSamplingOverflow.
inline constexpr int kSamplingMaxCandidates = 8192;
inline constexpr int kSamplingMaxVocab = 1 << 18;

enum SamplingStatus : int32_t { kSamplingOk = 0, kSamplingOverflow = 1 };

struct SamplingKernelParams {
  float* logits = nullptr;                 // [B, V]; the edits are applied in place
  const SamplingRow* rows = nullptr;       // [B]
  const int32_t* edit_offsets = nullptr;   // [B + 1]; row b's edits are [offsets[b], offsets[b + 1])
  const SamplingEdit* edits = nullptr;     // [E]; per row sorted by token, stable (application order)
  float* edit_raw = nullptr;               // [E] out: the raw logit of each edit's token
  int32_t* tokens = nullptr;               // [B] out; -1 where status is kSamplingOverflow
  float* logprobs = nullptr;               // [B] out: raw logprob of the token (0 without logprobs)
  int32_t* top_tokens = nullptr;           // [B, kSamplingMaxTopLogprobs] out; -1 past the row's count
  float* top_logprobs = nullptr;           // [B, kSamplingMaxTopLogprobs] out
  int32_t* status = nullptr;               // [B] out: SamplingStatus
  int64_t* phase_stamps = nullptr;         // null, or [B, kSamplingPhases] out (benchmarks: where time goes)
  int64_t batch = 0;
  int32_t vocab = 0;
};

// Stamps per row in SamplingKernelParams::phase_stamps, taken by thread 0 of the row's first
// CTA: the global timer (ns) at the start and the end, and the SM clock (cycles) at the
// start, after the raw logprobs and the edits, after each of up to three phases of the
// setting's path, and at the end. A path with fewer phases repeats the last stamp. The phases:
// greedy: the argmax pass; top-k: threshold, gather, sort and ties; top-p: maximum, bucket
// masses, gather; min-p: maximum, gather; full-vocabulary walk: maximum, chains, block masses.
enum SamplingPhase : int {
  kSamplingStartNs = 0,
  kSamplingStartCycles,
  kSamplingPreparedCycles,
  kSamplingPhase1Cycles,
  kSamplingPhase2Cycles,
  kSamplingPhase3Cycles,
  kSamplingEndCycles,
  kSamplingEndNs,
  kSamplingPhases,
};

// One block per row, on sm_90 a cluster of 4 or 2 per row when the batch is at most 32 or 66
// (every pass over the row split over the cluster's CTAs, combined so that no value depends on
// the split); fixed grid: capture-safe, no host synchronisation.
cudaError_t LaunchSampling(const SamplingKernelParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
