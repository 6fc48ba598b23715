// ModelRunner: runs engine steps on a backend. The engine plans (which tokens of which
// sequences, in which KV slots and blocks), the runner owns the KV pools, the device work and
// the sampling.
//
// Every step is launched and later collected. A runner that runs a step to completion in
// Launch (the CPU backend) reports max_in_flight() == 1 and the engine collects each step
// before planning the next; a runner that only enqueues (the CUDA backend with device
// sampling) reports 2, and the engine plans and launches step n+1 while the device runs
// step n. Either way the sampled tokens land in a token buffer indexed by slot, and a chunk
// whose last token is still being sampled (ChunkView::feeds_last) reads it from there.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/kv_layout.h"
#include "model/step_view.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace peregrine {

struct TransferredKv;  // scheduler/engine_request.h

// Prompt logprobs (vLLM's prompt_logprobs): row i of the chunk scores targets[i], the token
// that follows the chunk's i-th token, for i < targets.size() <= num_tokens (a chunk that
// also samples scores at most num_tokens - 1 rows). The chunk's view has all_logits set.
inline constexpr int32_t kMaxScoreAlternatives = 20;
struct RunnerScoring {
  std::span<const int32_t> targets;
  int32_t num_top = 0;  // alternatives per row, 0..kMaxScoreAlternatives
};

// One sequence's part of a step.
struct RunnerChunk {
  int64_t seq_id = 0;  // for messages
  ChunkView view;
  RunnerScoring scoring;  // empty targets: nothing scored
  // Speculative decoding (runners with speculative_lookahead() > 0): -1, the sequence does
  // not speculate; >= 0, the runner's drafter follows the sequence through this chunk, and
  // a chunk of one sampled token may verify drafts up to `lookahead` deep after it (its
  // block table covers first_position + 1 + lookahead positions). Such a row's result is
  // the accepted drafts and then the token sampled after them.
  int32_t lookahead = -1;
  // The sequence's tokens known on the host, from position 0 (prompt, then output): what the
  // n-gram drafter (speculative/ngram.h) matches against. May end before the chunk's newest
  // token (one the launched step still samples).
  std::span<const int32_t> history;
};

// A scored chunk's rows, as ScoreToken (sampling/sampler.h) computes them.
using ChunkScores = std::vector<SampleResult>;

// What a collected step gives back.
struct CollectedStep {
  // Per sampling row: the token it sampled, after the row's accepted draft tokens.
  std::vector<SampleResult> samples;
  // Per sampling row: the accepted draft tokens before samples[i], in order (empty without
  // speculation). Each is the token non-speculative decoding would have sampled there.
  std::vector<std::vector<SampleResult>> drafts;
  // refeed_failed[i]: row i's token was not in the token buffer when the next step read it
  // (the device gave the row up and it was finished on the host), so a chunk fed from it
  // computed on a wrong token and its sequence must restart.
  std::vector<uint8_t> refeed_failed;
  // One entry per chunk with scoring targets, in chunk order.
  std::vector<ChunkScores> scores;
};

// Speculative decoding's counts since the runner started (vLLM's spec_decode metrics):
// verify steps of a row ("drafts"), draft tokens proposed, accepted, and accepted per
// position (index k: drafts whose position k + 1 was accepted).
struct SpeculativeCounts {
  int64_t num_drafts = 0;
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> accepted_per_position;
};


// Device time of the steps a runner has completed (runners that time their device; zero
// otherwise). idle_s counts the device's waits between consecutive steps while the engine
// had work (the host's share of a step that overlap hides), not its waits for requests.
// draft_s is the device time of speculative decoding's work between steps (committing the
// accepted drafts and running the drafter); it lies between steps but is not idle_s.
struct DeviceTime {
  double busy_s = 0.0;
  double idle_s = 0.0;
  double draft_s = 0.0;
  int64_t steps = 0;
};

// Host (wall) time inside a runner's calls (runners that time them; zero otherwise): Launch
// (planning, draft trees, sampling rows, enqueueing the step), Collect once the step is done
// (reading its results, acceptance, enqueueing commits), and drafting inside Collect (the
// drafter's inputs, its run and the wait for its tokens). The rest of the time between two
// steps is the engine's own.
struct RunnerHostTime {
  double launch_s = 0.0;
  double collect_s = 0.0;
  double draft_s = 0.0;
};

// A sampling row's grammar mask (structured outputs): none, known at Launch, or depending on
// the token a launched step is still sampling (the row's chunk feeds_last), in which case
// the engine hands it over through SupplyMasks once that token is on the host. The mask is
// applied to the row's logits before sampling (sampling/token_bitmask.h).
enum class RowMask : uint8_t { kNone, kReady, kDeferred };

// A chunk's sampling inputs.
struct RunnerSampling {
  const SamplingParams* params = nullptr;
  SequenceSamplingState* state = nullptr;
  RowMask mask = RowMask::kNone;
  const uint32_t* mask_words = nullptr;  // kReady: TokenMaskWords(vocab) words, read during Launch
};

// The KV pools a runner allocated: what kv_cache/ hands out ids for.
struct KvCapacity {
  KvLayout layout;
  int32_t num_slots = 0;
  int32_t num_blocks = 0;
  int32_t num_snapshots = 0;  // > 0: prefix caching
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Launched steps that may wait to be collected (1 or 2).
  virtual int max_in_flight() const = 0;
  // Runs or enqueues a step and samples one token per entry of `sampling` (one per chunk
  // with needs_logits, in chunk order) exactly as Sample() would; scores the chunks' scoring
  // targets (at most max_scored_rows() rows per step). Sampling states stay alive
  // until the step is collected. A failure launches nothing and leaves the chunks' slots
  // unusable (the engine errors those requests out).
  virtual Status Launch(std::span<const RunnerChunk> chunks, std::span<const RunnerSampling> sampling) = 0;
  // Waits for the oldest launched step and returns one result per sampling row. Rows with
  // skip[i] set are not wanted any more (their sequence finished or restarts): their
  // sampling state is left untouched and their result is empty. A failure leaves the
  // step's slots unusable.
  virtual Status Collect(std::span<const uint8_t> skip, CollectedStep* out) = 0;
  // The newest launched step's kDeferred masks, one per deferred row in row order (nullptr:
  // the row turned out unconstrained), read during the call. Every step with deferred rows
  // gets exactly one call before it is collected; the device's sampling of that step waits
  // for it while its forward runs. A runner that cannot wait on the host reports
  // defers_masks() false and the engine collects before launching such rows.
  virtual Status SupplyMasks(std::span<const uint32_t* const> /*masks*/) {
    return Internal("this runner takes no deferred grammar masks");
  }
  virtual bool defers_masks() const { return false; }
  virtual KvCapacity kv_capacity() const = 0;
  // Ok while the runner can run steps; why not, for good, once it cannot (a rank of its
  // model died). The engine checks it after a failed step.
  virtual Status health() const { return Status::Ok(); }
  // Scored rows a step may hold besides one sampled row per slot (0: no prompt logprobs).
  virtual int64_t max_scored_rows() const = 0;
  virtual DeviceTime device_time() const { return {}; }
  virtual RunnerHostTime host_time() const { return {}; }
  // Draft positions a speculating row may verify after its token (0: no speculation).
  virtual int32_t speculative_lookahead() const { return 0; }
  // Verify nodes a speculating row adds to a step at most (the step's token budget).
  virtual int32_t speculative_max_nodes() const { return 0; }
  virtual SpeculativeCounts speculative_counts() const { return {}; }
  // The engine has run out of work and waits for requests: the wait before the next step is
  // not idle time of a busy device.
  virtual void NoteIdle() {}
  // Disaggregated serving. ExportKv: the state of the request that holds `num_tokens`
  // positions in `slot` and `blocks` (the first KvLayout::BlocksFor(num_tokens) of its table),
  // as pages in kv->pages (or kv->device): the slot's per-request state, then one page per
  // block. Called after the step that computed those positions was collected; leaves the
  // state untouched.
  virtual Status ExportKv(int32_t /*slot*/, std::span<const int32_t> /*blocks*/, int64_t /*num_tokens*/,
                          TransferredKv* /*kv*/) {
    return Unimplemented("this backend cannot export KV pages (prefill/decode disaggregation)");
  }
  // Writes the pages of `kv` (exported by a runner with the same kv_fingerprint()) into
  // `slot` and `blocks`; the slot then continues at position num_tokens as if it had computed
  // them. InvalidArgument for pages that do not fit the layout, DataLoss for device pages
  // whose checksum does not match (nothing usable is left in the slot either way).
  virtual Status ImportKv(int32_t /*slot*/, std::span<const int32_t> /*blocks*/, int64_t /*num_tokens*/,
                          const TransferredKv& /*kv*/) {
    return Unimplemented("this backend cannot import KV pages (prefill/decode disaggregation)");
  }
  // Names the pages' layout and format: equal between runners whose pages are
  // interchangeable; empty where ExportKv is unimplemented.
  virtual std::string kv_fingerprint() const { return {}; }
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_context() const = 0;
  virtual std::vector<int32_t> eos_token_ids() const = 0;
};

}  // namespace peregrine
