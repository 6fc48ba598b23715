#include "kv_cache/kv_manager.h"

#include <algorithm>

#include "base/check.h"

namespace peregrine {

KvManager::KvManager(const KvCacheConfig& config)
    : config_(config),
      caching_(config.enable_prefix_caching && config.layout.can_snapshot() && config.num_snapshots > 0),
      blocks_(config.num_blocks),
      snapshots_(caching_ ? config.num_snapshots : 0) {
  for (int32_t s = config.num_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

int64_t KvManager::admit(int64_t request, std::span<const int32_t> tokens, std::string_view cache_salt) {
  PG_CHECK(can_admit(), "no free KV slot");
  PG_CHECK(!holds(request), "request admitted twice");
  RequestKv kv;
  kv.slot = free_slots_.back();
  free_slots_.pop_back();
  if (caching_) {
    kv.root = PrefixRoot(cache_salt);
    // The longest run of cached blocks, then the deepest boundary in it with a snapshot. The
    // last token is always computed (its logits start the generation).
    const int64_t b = block_tokens();
    const int64_t max_blocks = tokens.empty() ? 0 : (static_cast<int64_t>(tokens.size()) - 1) / b;
    std::vector<BlockHash> keys;
    std::vector<int32_t> found;
    BlockHash key = kv.root;
    for (int64_t j = 0; j < max_blocks; ++j) {
      key = ChainBlock(key, tokens.subspan(static_cast<size_t>(j * b), static_cast<size_t>(b)));
      const int32_t id = blocks_.find(key);
      if (id < 0) break;
      keys.push_back(key);
      found.push_back(id);
    }
    int64_t hit = static_cast<int64_t>(found.size());
    int32_t snapshot = -1;
    for (; hit > 0; --hit)
      if ((snapshot = snapshots_.find(keys[static_cast<size_t>(hit - 1)])) >= 0) break;
    // The blocks are a prefix of the table; BlocksFor(hit * b) == hit since first_entry <= b.
    for (int64_t j = 0; j < hit; ++j) {
      blocks_.acquire(found[static_cast<size_t>(j)]);
      kv.blocks.push_back(found[static_cast<size_t>(j)]);
    }
    if (hit > 0) {
      snapshots_.acquire(snapshot);
      kv.restore = snapshot;
      kv.held_restore = snapshot;
      kv.last_key = keys[static_cast<size_t>(hit - 1)];
    }
    kv.num_keyed_blocks = hit;
    kv.num_tokens = hit * b;
    kv.num_cached_tokens = hit * b;
  }
  const int64_t hit_tokens = kv.num_cached_tokens;
  requests_.emplace(request, std::move(kv));
  return hit_tokens;
}

int32_t KvManager::BlocksNeeded(const RequestKv& kv, int64_t num_new) const {
  const int64_t need = config_.layout.BlocksFor(kv.num_tokens + num_new) - static_cast<int64_t>(kv.blocks.size());
  return static_cast<int32_t>(std::max<int64_t>(need, 0));
}

bool KvManager::can_append(int64_t request, int64_t num_new) const {
  return blocks_.can_allocate(BlocksNeeded(get(request), num_new));
}

void KvManager::append(int64_t request, int64_t num_new, std::vector<int32_t>* snapshots) {
  PG_CHECK(can_append(request, num_new), "append without room");
  RequestKv& kv = requests_.at(request);
  for (int32_t n = BlocksNeeded(kv, num_new); n > 0; --n)
    kv.blocks.push_back(blocks_.allocate(kv.blocks.empty() ? -1 : kv.blocks.back()));
  const int64_t before = kv.num_tokens;
  kv.num_tokens += num_new;
  if (snapshots == nullptr) return;
  snapshots->clear();
  const int64_t b = block_tokens();
  if (b <= 0) return;
  for (int64_t boundary = before / b + 1; boundary * b <= kv.num_tokens; ++boundary) {
    int32_t s = -1;
    if (caching_ && snapshots_.can_allocate(1)) {
      s = snapshots_.allocate();
      kv.written.emplace_back(boundary, s);
    }
    snapshots->push_back(s);
  }
}

void KvManager::truncate(int64_t request, int64_t num_tokens) {
  RequestKv& kv = requests_.at(request);
  if (num_tokens >= kv.num_tokens) return;
  PG_CHECK(num_tokens >= kv.num_keyed_blocks * std::max<int64_t>(block_tokens(), 1), "truncating keyed blocks");
  kv.num_tokens = num_tokens;
  const auto keep = static_cast<size_t>(config_.layout.BlocksFor(num_tokens));
  while (kv.blocks.size() > keep) {
    blocks_.release(kv.blocks.back());
    kv.blocks.pop_back();
  }
  const int64_t b = block_tokens();
  for (auto w = kv.written.begin(); w != kv.written.end();) {
    if (w->first * b <= num_tokens) {
      ++w;
      continue;
    }
    snapshots_.release(w->second);
    w = kv.written.erase(w);
  }
}

int32_t KvManager::take_restore(int64_t request) {
  RequestKv& kv = requests_.at(request);
  const int32_t s = kv.restore;
  kv.restore = -1;
  return s;
}

void KvManager::commit(int64_t request, std::span<const int32_t> known) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  RequestKv& kv = it->second;
  if (kv.held_restore >= 0 && kv.restore < 0) {
    snapshots_.release(kv.held_restore);
    kv.held_restore = -1;
  }
  if (!caching_) return;
  const int64_t b = block_tokens();
  const int64_t full = std::min<int64_t>(kv.num_tokens, static_cast<int64_t>(known.size())) / b;
  for (; kv.num_keyed_blocks < full; ++kv.num_keyed_blocks) {
    const int64_t j = kv.num_keyed_blocks;
    kv.last_key = ChainBlock(j == 0 ? kv.root : kv.last_key, known.subspan(static_cast<size_t>(j * b), static_cast<size_t>(b)));
    (void)blocks_.cache(kv.blocks[static_cast<size_t>(j)], kv.last_key);  // a duplicate stays unkeyed
    for (auto w = kv.written.begin(); w != kv.written.end();) {
      if (w->first != j + 1) {
        ++w;
        continue;
      }
      (void)snapshots_.cache(w->second, kv.last_key);
      snapshots_.release(w->second);  // cached: evictable from now on; a duplicate: free
      w = kv.written.erase(w);
    }
  }
}

void KvManager::free(int64_t request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  RequestKv& kv = it->second;
  // Deepest blocks first, so they are evicted before the prefixes that lead to them.
  for (auto b = kv.blocks.rbegin(); b != kv.blocks.rend(); ++b) blocks_.release(*b);
  for (const auto& [boundary, s] : kv.written) snapshots_.release(s);
  if (kv.held_restore >= 0) snapshots_.release(kv.held_restore);
  free_slots_.push_back(kv.slot);
  requests_.erase(it);
}

const RequestKv& KvManager::get(int64_t request) const {
  auto it = requests_.find(request);
  PG_CHECK(it != requests_.end(), "unknown request");
  return it->second;
}

bool KvManager::fits_when_empty(int64_t num_tokens) const {
  return config_.num_slots > 0 && config_.layout.BlocksFor(num_tokens) <= blocks_.num_blocks();
}

double KvManager::usage() const {
  const int32_t n = blocks_.num_blocks();
  return n > 0 ? 1.0 - static_cast<double>(blocks_.num_free()) / n : 0.0;
}

int64_t KvManager::capacity_tokens() const {
  return static_cast<int64_t>(blocks_.num_blocks()) * std::max<int64_t>(block_tokens(), 0);
}

}  // namespace peregrine
