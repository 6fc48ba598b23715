// The KV state a model keeps, as it declares it: the runtime sizes and allocates one pool per
// kind from it, and kv_cache/ hands out the ids that address the pools. Host code, no device.
//
// Two scopes of state:
// - paged kinds grow with the context: one page per block of `block_tokens` tokens in every
//   paged kind, addressed by one block id (a request's block table serves all of them);
// - per-request kinds have a fixed size (rings, pending compressor rows): one region per
//   request slot.
// A snapshot holds the per-request state as it stands at a block boundary (what a request
// that shares the prefix up to that boundary must start from); models that cannot snapshot
// declare snapshot_bytes = 0 and get no prefix caching.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace peregrine {

struct KvKind {
  std::string name;
  int64_t bytes = 0;        // per block (paged) or per request (per-request), over all layers
  int64_t fixed_bytes = 0;  // the pool's bytes beside its pages or slots (per-step rows of a backend)
};

struct KvLayout {
  int64_t block_tokens = 0;        // tokens of context one block covers; 0: nothing is paged
  int64_t first_entry_tokens = 1;  // block j is taken once a request holds j*block_tokens + this many tokens
  std::vector<KvKind> paged;
  std::vector<KvKind> per_request;
  int64_t snapshot_bytes = 0;

  int64_t bytes_per_block() const {
    int64_t b = 0;
    for (const KvKind& k : paged) b += k.bytes;
    return b;
  }
  int64_t bytes_per_request() const {
    int64_t b = 0;
    for (const KvKind& k : per_request) b += k.bytes;
    return b;
  }
  // Blocks a request holding `num_tokens` tokens of context needs.
  int64_t BlocksFor(int64_t num_tokens) const {
    if (block_tokens <= 0 || paged.empty() || num_tokens < first_entry_tokens) return 0;
    return (num_tokens - first_entry_tokens) / block_tokens + 1;
  }
  bool can_snapshot() const { return block_tokens > 0 && snapshot_bytes > 0 && !paged.empty(); }
};

}  // namespace peregrine
