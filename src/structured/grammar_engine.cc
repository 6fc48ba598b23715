#include "structured/grammar_engine.h"

#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace peregrine::structured {

class CompiledGrammar {
 public:
  explicit CompiledGrammar(xgrammar::CompiledGrammar grammar) : grammar(std::move(grammar)) {}
  xgrammar::CompiledGrammar grammar;
};

// ---------------------------------------------------------------------------------------
// GrammarMatcher

namespace {

// Host int32 bitmask rows as xgrammar reads them: `shape` is [n] or [rows, n] words.
DLTensor BitmaskTensor(uint32_t* words, int64_t* shape, int ndim) {
  DLTensor t{};
  t.data = words;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = ndim;
  t.dtype = DLDataType{kDLInt, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;
  return t;
}

}  // namespace

struct GrammarMatcher::Impl {
  explicit Impl(std::shared_ptr<const CompiledGrammar> g)
      : grammar(std::move(g)), matcher(grammar->grammar), vocab_size(grammar->grammar.GetTokenizerInfo().GetVocabSize()) {}
  std::shared_ptr<const CompiledGrammar> grammar;
  xgrammar::GrammarMatcher matcher;
  int64_t vocab_size;
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : impl_(std::make_unique<Impl>(std::move(grammar))) {}
GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;

bool GrammarMatcher::Accept(int32_t token) {
  if (token < 0 || token >= impl_->vocab_size || impl_->matcher.IsTerminated()) return false;
  try {
    return impl_->matcher.AcceptToken(token);
  } catch (const std::exception&) {
    return false;
  }
}

bool GrammarMatcher::FillMask(uint32_t* words) {
  const int64_t n = MaskWords(impl_->vocab_size);
  if (impl_->matcher.IsTerminated()) {
    // Nothing may follow; only a stop token keeps the row well-defined.
    for (int64_t i = 0; i < n; ++i) words[i] = 0;
    for (int32_t id : impl_->grammar->grammar.GetTokenizerInfo().GetStopTokenIds()) words[id / 32] |= 1u << (id % 32);
    return true;
  }
  int64_t shape[1] = {n};
  DLTensor t = BitmaskTensor(words, shape, 1);
  return impl_->matcher.FillNextTokenBitmask(&t, 0);
}

bool GrammarMatcher::is_terminated() const { return impl_->matcher.IsTerminated(); }

struct MaskBatch::Impl {
  explicit Impl(int threads) : batch(static_cast<int32_t>(threads)) {}
  xgrammar::BatchGrammarMatcher batch;
  std::vector<xgrammar::GrammarMatcher> matchers;
  std::vector<int32_t> rows;
};

MaskBatch::MaskBatch(int threads) : threads_(std::max(threads, 1)), impl_(std::make_unique<Impl>(threads_)) {}
MaskBatch::~MaskBatch() = default;

void MaskBatch::Fill(std::span<GrammarMatcher* const> matchers, std::span<const int32_t> rows, int64_t num_rows,
                     uint32_t* words) {
  if (matchers.empty()) return;
  const int64_t n = MaskWords(matchers[0]->impl_->vocab_size);
  impl_->matchers.clear();
  impl_->rows.clear();
  for (size_t j = 0; j < matchers.size(); ++j) {
    GrammarMatcher& m = *matchers[j];
    uint32_t* row = words + static_cast<int64_t>(rows[j]) * n;
    // Terminated matchers, and batches too small to gain from threads, go one by one.
    if (threads_ == 1 || matchers.size() < 8 || m.is_terminated()) {
      if (!m.FillMask(row)) std::fill(row, row + n, ~0u);
      continue;
    }
    impl_->matchers.push_back(m.impl_->matcher);  // a handle on the same state
    impl_->rows.push_back(rows[j]);
  }
  if (impl_->matchers.empty()) return;
  int64_t shape[2] = {num_rows, n};
  DLTensor t = BitmaskTensor(words, shape, 2);
  impl_->batch.BatchFillNextTokenBitmask(&impl_->matchers, &t, impl_->rows);
  impl_->matchers.clear();
}

void GrammarMatcher::Rollback(int n) { impl_->matcher.Rollback(n); }

// ---------------------------------------------------------------------------------------
// GrammarEngine

struct GrammarEngine::Impl {
  Impl(xgrammar::TokenizerInfo info, GrammarEngineOptions o)
      : options(o),
        vocab_size(info.GetVocabSize()),
        // One internal thread per compilation: parallelism comes from our compile threads.
        compiler(info, /*max_threads=*/1, /*cache_enabled=*/true, o.cache_bytes) {}

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    for (std::thread& t : threads) t.join();
  }

  void Worker() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [this] { return stopping || !queue.empty(); });
        if (stopping) return;
        task = std::move(queue.front());
        queue.pop_front();
      }
      task();
    }
  }

  xgrammar::CompiledGrammar CompileJson(const std::string& schema, bool any_whitespace) {
    return compiler.CompileJSONSchema(schema, any_whitespace, std::nullopt, std::nullopt, /*strict_mode=*/true,
                                      any_whitespace ? std::optional<int>(kMaxJsonWhitespace) : std::nullopt);
  }

  xgrammar::CompiledGrammar CompileNow(const GrammarSpec& spec) {
    switch (spec.kind) {
      case GrammarKind::kJsonSchema:
        return CompileJson(spec.source, spec.any_whitespace);
      case GrammarKind::kJsonObject:  // an object, as OpenAI's json_object promises
        return CompileJson(R"({"type": "object"})", spec.any_whitespace);
      case GrammarKind::kRegex:
        return compiler.CompileRegex(spec.source);
      case GrammarKind::kChoice:
        return compiler.CompileGrammar(ChoicesToEbnf(spec.choices));
      case GrammarKind::kEbnf:
        return compiler.CompileGrammar(spec.source);
      case GrammarKind::kStructuralTag:
        return compiler.CompileStructuralTag(spec.source);
    }
    throw std::invalid_argument("unknown grammar kind");
  }

  GrammarEngineOptions options;
  int64_t vocab_size;
  xgrammar::GrammarCompiler compiler;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  int busy = 0;  // tasks queued or running
  bool stopping = false;
  std::vector<std::thread> threads;
};

GrammarEngine::GrammarEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrammarEngine::~GrammarEngine() = default;

Result<std::unique_ptr<GrammarEngine>> GrammarEngine::Create(GrammarVocabulary vocabulary,
                                                             GrammarEngineOptions options) {
  if (vocabulary.token_bytes.empty()) return InvalidArgument("grammar vocabulary is empty");
  if (options.compile_threads < 1 || options.max_queued < 0 || options.time_limit.count() <= 0)
    return InvalidArgument("grammar engine: compile_threads >= 1, max_queued >= 0, time_limit > 0");
  const int n = static_cast<int>(vocabulary.token_bytes.size());
  for (int32_t id : vocabulary.stop_token_ids)
    if (id < 0 || id >= n) return InvalidArgument("grammar vocabulary: stop token id out of range");
  std::unique_ptr<Impl> impl;
  try {
    xgrammar::TokenizerInfo info(vocabulary.token_bytes, xgrammar::VocabType::RAW, n, vocabulary.stop_token_ids);
    impl = std::make_unique<Impl>(std::move(info), options);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("grammar vocabulary: ") + e.what());
  }
  for (int i = 0; i < options.compile_threads; ++i) impl->threads.emplace_back([p = impl.get()] { p->Worker(); });
  return std::unique_ptr<GrammarEngine>(new GrammarEngine(std::move(impl)));
}

Result<std::shared_ptr<const CompiledGrammar>> GrammarEngine::Compile(const GrammarSpec& spec) {
  if (spec.kind == GrammarKind::kChoice) {
    if (spec.choices.empty()) return InvalidArgument("a choice list needs at least one string");
    for (const std::string& c : spec.choices)
      if (c.empty()) return InvalidArgument("choices must be non-empty strings");
  }
  struct Outcome {
    std::shared_ptr<const CompiledGrammar> grammar;
    std::string error;
  };
  auto promise = std::make_shared<std::promise<Outcome>>();
  std::future<Outcome> future = promise->get_future();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->busy >= impl_->options.compile_threads + impl_->options.max_queued)
      return ResourceExhausted("every grammar compile thread is busy; retry later");
    ++impl_->busy;
    impl_->queue.push_back([impl = impl_.get(), spec, promise] {
      Outcome out;
      try {
        out.grammar = std::make_shared<CompiledGrammar>(impl->CompileNow(spec));
      } catch (const std::exception& e) {
        out.error = e.what();
        if (out.error.empty()) out.error = "invalid grammar";
      } catch (...) {
        out.error = "invalid grammar";
      }
      {
        std::lock_guard<std::mutex> lock(impl->mu);
        --impl->busy;
      }
      promise->set_value(std::move(out));
    });
  }
  impl_->cv.notify_one();
  if (future.wait_for(impl_->options.time_limit) != std::future_status::ready)
    return DeadlineExceeded("the " + std::string(GrammarKindName(spec.kind)) + " did not compile within " +
                            std::to_string(impl_->options.time_limit.count()) + " ms");
  Outcome out = future.get();
  if (!out.error.empty()) return InvalidArgument(out.error);
  return std::shared_ptr<const CompiledGrammar>(std::move(out.grammar));
}

int64_t GrammarEngine::vocab_size() const { return impl_->vocab_size; }
int64_t GrammarEngine::cache_bytes() const { return impl_->compiler.GetCacheSizeBytes(); }
int64_t GrammarEngine::cache_limit_bytes() const { return impl_->compiler.CacheLimitBytes(); }

}  // namespace peregrine::structured
