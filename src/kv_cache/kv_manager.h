// The DeepSeek-V4 KV state manager (host bookkeeping, no device code).
//
// Per request the model keeps: a sliding-window ring and compressor state per layer (fixed
// size: one "slot" of the slot pool), compressed ratio-4 entries for every CSA layer and
// their indexer keys, and compressed ratio-128 entries for every HCA layer. Compressed
// entries live in pages of `page_size` entries; one page id addresses the same block in
// every layer of its kind (as block tables do), so a request has three page tables.
// Mutations come in can_X / X pairs; X on a state that fails can_X is a broken invariant.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv_cache/page_pool.h"

namespace peregrine {

struct KvCacheConfig {
  int32_t page_size = 64;          // compressed entries per page
  int32_t num_slots = 64;          // requests that can hold window/compressor state at once
  int32_t num_csa_pages = 0;       // pages for ratio-4 entries (+ indexer keys, same ids)
  int32_t num_hca_pages = 0;       // pages for ratio-128 entries
  int64_t csa_ratio = 4;
  int64_t hca_ratio = 128;
  bool has_csa = true;             // the model has CSA layers
  bool has_hca = true;             // the model has HCA layers
};

struct RequestKv {
  int32_t slot = -1;
  int64_t num_tokens = 0;             // tokens whose KV is held
  std::vector<int32_t> csa_pages;     // ratio-4 entries and indexer keys
  std::vector<int32_t> hca_pages;     // ratio-128 entries
};

class KvManager {
 public:
  explicit KvManager(const KvCacheConfig& config);

  // A new request needs a slot (and pages for its first tokens, via can_append).
  bool can_admit() const { return !free_slots_.empty(); }
  void admit(int64_t request);
  // Room for `num_new` more tokens of an admitted request.
  bool can_append(int64_t request, int64_t num_new) const;
  void append(int64_t request, int64_t num_new);
  // Frees everything the request holds (no-op for unknown requests).
  void free(int64_t request);

  bool holds(int64_t request) const { return requests_.count(request) != 0; }
  const RequestKv& get(int64_t request) const;
  // Whether a request of `num_tokens` could ever fit in an empty cache.
  bool fits_when_empty(int64_t num_tokens) const;
  // Fraction of pages in use (the larger of the two pools).
  double usage() const;
  // Tokens of context one request could hold if it had the whole cache.
  int64_t capacity_tokens() const;
  const KvCacheConfig& config() const { return config_; }

 private:
  int32_t CsaPagesFor(int64_t num_tokens) const;
  int32_t HcaPagesFor(int64_t num_tokens) const;

  KvCacheConfig config_;
  PagePool csa_pool_;
  PagePool hca_pool_;
  std::vector<int32_t> free_slots_;
  std::unordered_map<int64_t, RequestKv> requests_;
};

}  // namespace peregrine
