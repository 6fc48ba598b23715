// GrammarEngine: compiles GrammarSpecs against the model's vocabulary (xgrammar), with a
// bounded cache and a time limit, and makes the per-sequence matchers that turn a grammar's
// state into a token bitmask.
//
// Threads: Compile may be called from any thread (the server's workers); it runs the
// compilation on the engine's own compile threads and waits at most the time limit. A
// compilation that overruns keeps its thread until it ends (xgrammar cannot be interrupted)
// but the caller gets kDeadlineExceeded at once; while every compile thread is taken and the
// queue is full, Compile answers kResourceExhausted without queueing. A GrammarMatcher is
// used by one thread at a time (the engine's).
//
// Memory: compiled grammars live in xgrammar's LRU cache, bounded in bytes; a grammar in use
// by a sequence stays alive through its shared handle even when evicted.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "structured/grammar_spec.h"

namespace peregrine::structured {

struct GrammarEngineOptions {
  int compile_threads = 2;
  std::chrono::milliseconds time_limit{10'000};
  int64_t cache_bytes = int64_t{512} << 20;  // compiled grammars kept for reuse
  int max_queued = 64;                        // compilations waiting for a thread
};

// The vocabulary as the grammar sees it: each id's bytes as it appears in decoded text
// (empty for ids the grammar must never pick: special and reserved tokens), and the ids that
// end a sequence (allowed once the grammar is complete).
struct GrammarVocabulary {
  std::vector<std::string> token_bytes;  // one per model vocabulary row
  std::vector<int32_t> stop_token_ids;
};

// Words of a token bitmask for a vocabulary: bit (id % 32) of word (id / 32) set = allowed.
inline int64_t MaskWords(int64_t vocab_size) { return (vocab_size + 31) / 32; }

class CompiledGrammar;

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  // Advances by one sampled token; false (and no change) when the grammar forbids it.
  bool Accept(int32_t token);
  // Writes the allowed next tokens into `words` (MaskWords(vocab) of them). Returns false
  // when every token is allowed (the mask is then all ones).
  bool FillMask(uint32_t* words);
  // The grammar accepted a stop token: nothing more may follow.
  bool is_terminated() const;
  // Undoes the last `n` accepted tokens (speculative drafts that were rejected).
  void Rollback(int n);

 private:
  friend class MaskBatch;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The masks of several matchers at once, on up to `threads` threads (xgrammar's batch
// matcher), for a batch's rows: matcher j writes its MaskWords(vocab) words at
// words + rows[j] * MaskWords(vocab), all ones where its grammar allows everything.
// Used by one thread at a time.
class MaskBatch {
 public:
  explicit MaskBatch(int threads);
  ~MaskBatch();
  int threads() const { return threads_; }
  void Fill(std::span<GrammarMatcher* const> matchers, std::span<const int32_t> rows, int64_t num_rows,
            uint32_t* words);

 private:
  struct Impl;
  int threads_;
  std::unique_ptr<Impl> impl_;
};

class GrammarEngine {
 public:
  static Result<std::unique_ptr<GrammarEngine>> Create(GrammarVocabulary vocabulary,
                                                      GrammarEngineOptions options = {});
  ~GrammarEngine();

  // kInvalidArgument: the spec is not a valid grammar (the message says why);
  // kDeadlineExceeded: it did not compile within the time limit; kResourceExhausted: every
  // compile thread is busy and the queue is full.
  Result<std::shared_ptr<const CompiledGrammar>> Compile(const GrammarSpec& spec);

  int64_t vocab_size() const;
  int64_t cache_bytes() const;       // compiled grammars held by the cache now
  int64_t cache_limit_bytes() const;

 private:
  struct Impl;
  explicit GrammarEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace peregrine::structured
