#include "kv_cache/block_pool.h"

#include "base/check.h"

namespace peregrine {

BlockPool::BlockPool(int32_t num_blocks)
    : refs_(static_cast<size_t>(num_blocks), 0),
      hash_of_(static_cast<size_t>(num_blocks)),
      lru_pos_(static_cast<size_t>(num_blocks), lru_.end()) {
  PG_CHECK(num_blocks >= 0, "negative block count");
  for (int32_t i = 0; i < num_blocks; ++i) free_.insert(free_.end(), i);
}

void BlockPool::Forget(int32_t id) {
  auto& h = hash_of_[static_cast<size_t>(id)];
  if (!h) return;
  by_hash_.erase(*h);
  h.reset();
}

int32_t BlockPool::allocate(int32_t after) {
  PG_CHECK(can_allocate(1), "block pool exhausted");
  int32_t id;
  if (!free_.empty()) {
    auto it = after >= 0 ? free_.find(after + 1) : free_.end();
    if (it == free_.end()) it = free_.begin();
    id = *it;
    free_.erase(it);
  } else {
    id = lru_.front();
    lru_.pop_front();
    lru_pos_[static_cast<size_t>(id)] = lru_.end();
    Forget(id);
    ++num_evictions_;
  }
  refs_[static_cast<size_t>(id)] = 1;
  return id;
}

int32_t BlockPool::find(const BlockHash& hash) const {
  auto it = by_hash_.find(hash);
  return it == by_hash_.end() ? -1 : it->second;
}

void BlockPool::acquire(int32_t id) {
  PG_CHECK(id >= 0 && id < num_blocks(), "block id outside the pool");
  int32_t& r = refs_[static_cast<size_t>(id)];
  if (r == 0) {
    PG_CHECK(is_cached(id), "acquiring a free block");
    lru_.erase(lru_pos_[static_cast<size_t>(id)]);
    lru_pos_[static_cast<size_t>(id)] = lru_.end();
  }
  ++r;
}

void BlockPool::release(int32_t id) {
  PG_CHECK(id >= 0 && id < num_blocks(), "block id outside the pool");
  int32_t& r = refs_[static_cast<size_t>(id)];
  PG_CHECK(r > 0, "releasing a block nobody holds");
  if (--r > 0) return;
  if (is_cached(id)) {
    lru_pos_[static_cast<size_t>(id)] = lru_.insert(lru_.end(), id);
  } else {
    free_.insert(id);
  }
}

bool BlockPool::cache(int32_t id, const BlockHash& hash) {
  PG_CHECK(id >= 0 && id < num_blocks() && refs_[static_cast<size_t>(id)] > 0, "caching a block nobody holds");
  if (is_cached(id)) return *hash_of_[static_cast<size_t>(id)] == hash;
  if (!by_hash_.emplace(hash, id).second) return false;
  hash_of_[static_cast<size_t>(id)] = hash;
  return true;
}

}  // namespace peregrine
