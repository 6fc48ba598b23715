// How many slots, blocks and snapshots the KV pools get (the runtime owns the pools; the
// model's KvLayout says what each holds). Host arithmetic only.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "runtime/model_runner.h"

namespace peregrine {

struct KvBudget {
  int32_t num_slots = 0;           // per-request state for this many running requests
  bool prefix_caching = true;
  double snapshot_fraction = 0.1;  // of the paged bytes, for block-boundary snapshots
};

// Pools that fill `bytes`: the slots first, then snapshots and blocks sharing the rest.
// ResourceExhausted when the slots alone do not fit or no request of `min_tokens` would.
Result<KvCapacity> SizeKvPools(const KvLayout& layout, uint64_t bytes, int64_t min_tokens, const KvBudget& budget);
// Pools with blocks for `num_tokens` tokens of context (and snapshots beside them).
KvCapacity SizeKvPoolsForTokens(const KvLayout& layout, int64_t num_tokens, const KvBudget& budget);

// Bytes of each pool at a capacity.
struct KvPoolBytes {
  uint64_t per_request = 0;
  uint64_t blocks = 0;
  uint64_t snapshots = 0;
  uint64_t total() const { return per_request + blocks + snapshots; }
};
KvPoolBytes PoolBytes(const KvCapacity& capacity);

// The startup report: bytes per kind, tokens that fit, requests that fit at 4K, 128K and
// `max_context` (limited by the slots).
std::string DescribeKvCapacity(const KvCapacity& capacity, int64_t max_context);
// A fingerprint of the pages a layout makes (ModelRunner::kv_fingerprint): the backend's
// format name, the block size and every kind with its bytes.
std::string KvFingerprint(const std::string& format, const KvLayout& layout);

// Requests of `context` tokens that fit at once.
int64_t RequestsThatFit(const KvCapacity& capacity, int64_t context);

}  // namespace peregrine
