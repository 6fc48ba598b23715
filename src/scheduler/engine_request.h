// A generation request as the engine takes it, and the events it answers with: the data the
// scheduler's Sequence carries and the engine's clients (engine/engine_client.h) exchange.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sampling/sampler.h"
#include "sampling/sampling_params.h"

namespace peregrine {

namespace structured {
class CompiledGrammar;  // structured/grammar_engine.h
}

// Disaggregated serving (disaggregation/): a request's KV state computed by a prefill engine,
// for a decode engine to continue from. The pages are the runner's (ModelRunner::ExportKv):
// the slot's per-request state, then one page per block, all in the layout `fingerprint`
// names (ModelRunner::kv_fingerprint). The pages are host bytes, or (`device`) left in the
// exporting process's device memory for an importer on the same host to copy over CUDA IPC.
struct DeviceKvPages {
  std::vector<uint8_t> ipc_handle;  // the exporter's staging arena (a cudaIpcMemHandle_t's bytes)
  std::string host;                 // the exporter's host (its boot id): IPC works only there
  uint64_t arena_bytes = 0;         // the arena's size (every page lies inside it)
  std::vector<uint64_t> offsets;    // per page: where it starts in the arena
  std::vector<uint64_t> sizes;      // per page: its bytes (a multiple of 8)
  std::vector<uint64_t> checksums;  // per page: KvPageChecksum (runtime/kv_page_checksum.h)

  uint64_t bytes() const {
    uint64_t n = 0;
    for (uint64_t s : sizes) n += s;
    return n;
  }
};

struct TransferredKv {
  std::string fingerprint;
  std::vector<int32_t> prompt_ids;  // the prompt the state was computed over
  int64_t num_tokens = 0;           // positions the state holds (the whole prompt)
  int64_t num_cached_tokens = 0;    // of them, found in the prefill engine's prefix cache
  SampleResult first;               // the token the prefill engine sampled after the prompt
  std::vector<std::vector<uint8_t>> pages;
  // Set instead of `pages`. Whoever made it chose what dropping the last reference does (the
  // exporter frees the pages' staging; an importer tells the exporter it is done with them).
  std::shared_ptr<const DeviceKvPages> device;

  size_t num_pages() const { return device != nullptr ? device->sizes.size() : pages.size(); }
  uint64_t num_bytes() const {
    if (device != nullptr) return device->bytes();
    uint64_t n = 0;
    for (const std::vector<uint8_t>& p : pages) n += p.size();
    return n;
  }
};

// Called on the engine thread with the request's exported KV, or why there is none; must
// not block.
using KvExportSink = std::function<void(Result<TransferredKv>)>;

struct EngineRequest {
  std::string id;                      // unique among live requests
  std::vector<int32_t> prompt_ids;     // non-empty, every id < vocab size
  SamplingParams sampling;             // already validated
  int64_t max_tokens = 16;             // new tokens at most: >= 1, or 0 with prompt_logprobs (score only)
  std::vector<int32_t> stop_token_ids; // finish with kStop when generated (token is emitted)
  bool ignore_eos = false;             // when false, the model's EOS ids also finish with kStop
  std::string cache_salt;              // prefix-cache namespace: only requests with the same salt share blocks
  // Structured outputs: every generated token must keep the grammar matching (the mask is
  // applied before sampling); the grammar ends the request when it completes. With
  // grammar_after >= 0 the grammar starts after that token is generated (reasoning stays
  // free until </think>), and the token itself is not part of it.
  std::shared_ptr<const structured::CompiledGrammar> grammar;
  int32_t grammar_after = -1;
  // Prompt logprobs (vLLM's prompt_logprobs, completions' echo with logprobs): >= 0 scores
  // every prompt token after the first with that many alternatives (at most 20). Such a
  // request computes its whole prompt (no prefix-cache reuse before it is scored).
  int32_t prompt_logprobs = -1;
  // Disaggregation, prefill side: when set, the request's KV (its prompt's state and the token
  // sampled after it) goes to this sink once the request finishes (before its pages are
  // freed), or the reason it could not (the request failed, or ended before its prompt was
  // computed).
  KvExportSink export_kv;
  // Disaggregation, decode side: the state of the whole prompt (import_kv->prompt_ids equal
  // prompt_ids) and its first generated token come from a prefill engine. The engine loads it
  // into a slot instead of computing the prompt, emits `first` as the request's first token
  // and continues from there. After a preemption the request recomputes on its own.
  std::shared_ptr<const TransferredKv> import_kv;
  // When the transferred KV does not load (device pages failing their checksum): fail the
  // request (kError) instead of computing its prompt.
  bool import_required = false;
};

enum class FinishReason : uint8_t {
  kStop,     // EOS, a stop token id, or the grammar completed
  kLength,   // max_tokens or the context limit
  kAbort,    // Abort() or shutdown
  kError,    // the engine failed this request (message in EngineEvent::error)
};

// One event per request per engine step that produced something for it.
struct EngineEvent {
  std::vector<int32_t> token_ids;           // new tokens, usually one
  std::vector<SampleResult> samples;        // parallel to token_ids (logprobs when requested)
  // Prompt logprobs, once, on the first event with a token (or the finish when nothing was
  // generated): entry i scores prompt token i + 1 (ScoreToken, with rank).
  std::vector<SampleResult> prompt_logprobs;
  std::optional<FinishReason> finish;       // set on the last event of the request
  std::string error;                        // when finish == kError
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_prompt_tokens = 0;     // prefix-cache hits
  std::chrono::steady_clock::time_point time;
  // When the engine queued the request, and when it first scheduled it into a step (the
  // epoch while it never was): queue time is their difference, as vLLM measures it.
  std::chrono::steady_clock::time_point arrival_time;
  std::chrono::steady_clock::time_point scheduled_time;
};

// Called on the engine thread; must not block (post the event to the consumer's executor).
using EventSink = std::function<void(const EngineEvent&)>;

}  // namespace peregrine
