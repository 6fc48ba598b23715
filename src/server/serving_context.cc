#include "server/serving_context.h"

#include <cstdio>

#include "server/grammar_vocabulary.h"

namespace peregrine::server {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::shared_ptr<void> ServingContext::TryAdmit() {
  const int limit = config.limits.max_concurrent_requests;
  if (num_admitted_.fetch_add(1, std::memory_order_relaxed) >= limit) {
    num_admitted_.fetch_sub(1, std::memory_order_relaxed);
    return nullptr;
  }
  return std::shared_ptr<void>(static_cast<void*>(this), [](void* self) {
    static_cast<ServingContext*>(self)->num_admitted_.fetch_sub(1, std::memory_order_relaxed);
  });
}

Result<structured::GrammarEngine*> ServingContext::grammars() {
  std::call_once(grammars_once_, [this] {
    const std::vector<int32_t> eos = engine.eos_token_ids();
    grammars_ = structured::GrammarEngine::Create(GrammarVocabularyFor(tokenizer, engine.vocab_size(), eos));
  });
  if (!grammars_.ok()) return grammars_.status();
  return grammars_->get();
}

uint64_t ServingContext::NextRandom() {
  return SplitMix64(random_state_.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed));
}

std::string ServingContext::NewId(const char* prefix) {
  char buf[32];
  const uint64_t a = NextRandom();
  std::snprintf(buf, sizeof(buf), "%016llx%08x", static_cast<unsigned long long>(a),
                static_cast<unsigned>(NextRandom() >> 32));
  return std::string(prefix) + buf;
}

uint64_t JobRegistry::Add(Entry entry) {
  std::lock_guard lock(mutex_);
  const uint64_t key = next_key_++;
  entries_.emplace(key, std::move(entry));
  return key;
}

void JobRegistry::Remove(uint64_t key) {
  std::lock_guard lock(mutex_);
  entries_.erase(key);
}

size_t JobRegistry::size() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

std::vector<JobRegistry::Entry> JobRegistry::Entries() const {
  std::lock_guard lock(mutex_);
  std::vector<Entry> out;
  out.reserve(entries_.size());
  for (const auto& [key, entry] : entries_) out.push_back(entry);
  return out;
}

}  // namespace peregrine::server
