#include "runtime/kv_sizing.h"

#include <algorithm>
#include <cstdio>

namespace peregrine {

namespace {

int32_t Clamp32(uint64_t v) { return static_cast<int32_t>(std::min<uint64_t>(v, INT32_MAX)); }

std::string Gigabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

}  // namespace

Result<KvCapacity> SizeKvPools(const KvLayout& layout, uint64_t bytes, int64_t min_tokens, const KvBudget& budget) {
  KvCapacity c;
  c.layout = layout;
  c.num_slots = budget.num_slots;
  const uint64_t per_request = static_cast<uint64_t>(layout.bytes_per_request()) * static_cast<uint64_t>(budget.num_slots);
  if (per_request > bytes)
    return ResourceExhausted("the KV budget of " + Gigabytes(bytes) + " does not hold the per-request state of " +
                             std::to_string(budget.num_slots) + " sequences (" + Gigabytes(per_request) + ")");
  uint64_t left = bytes - per_request;
  const auto per_block = static_cast<uint64_t>(std::max<int64_t>(layout.bytes_per_block(), 1));
  if (budget.prefix_caching && layout.can_snapshot()) {
    const auto share = static_cast<uint64_t>(static_cast<double>(left) * std::clamp(budget.snapshot_fraction, 0.0, 0.9));
    c.num_snapshots = Clamp32(share / static_cast<uint64_t>(layout.snapshot_bytes));
    left -= static_cast<uint64_t>(c.num_snapshots) * static_cast<uint64_t>(layout.snapshot_bytes);
  }
  c.num_blocks = layout.paged.empty() ? 0 : Clamp32(left / per_block);
  if (layout.BlocksFor(min_tokens) > c.num_blocks)
    return ResourceExhausted("the KV budget of " + Gigabytes(bytes) + " holds " +
                             std::to_string(static_cast<int64_t>(c.num_blocks) * layout.block_tokens) +
                             " tokens, less than one request of " + std::to_string(min_tokens));
  return c;
}

KvCapacity SizeKvPoolsForTokens(const KvLayout& layout, int64_t num_tokens, const KvBudget& budget) {
  KvCapacity c;
  c.layout = layout;
  c.num_slots = budget.num_slots;
  c.num_blocks = layout.paged.empty() ? 0 : Clamp32(static_cast<uint64_t>(layout.BlocksFor(num_tokens)));
  if (budget.prefix_caching && layout.can_snapshot()) {
    const double f = std::clamp(budget.snapshot_fraction, 0.0, 0.9);
    const double paged = static_cast<double>(c.num_blocks) * static_cast<double>(layout.bytes_per_block());
    c.num_snapshots = std::max<int32_t>(1, Clamp32(static_cast<uint64_t>(paged * f / (1.0 - f) /
                                                                         static_cast<double>(layout.snapshot_bytes))));
  }
  return c;
}

KvPoolBytes PoolBytes(const KvCapacity& c) {
  KvPoolBytes b;
  b.per_request = static_cast<uint64_t>(c.layout.bytes_per_request()) * static_cast<uint64_t>(c.num_slots);
  b.blocks = static_cast<uint64_t>(c.layout.bytes_per_block()) * static_cast<uint64_t>(c.num_blocks);
  b.snapshots = static_cast<uint64_t>(c.layout.snapshot_bytes) * static_cast<uint64_t>(c.num_snapshots);
  return b;
}

int64_t RequestsThatFit(const KvCapacity& c, int64_t context) {
  const int64_t blocks = c.layout.BlocksFor(context);
  const int64_t by_blocks = blocks > 0 ? c.num_blocks / blocks : c.num_slots;
  return std::min<int64_t>(c.num_slots, by_blocks);
}

std::string DescribeKvCapacity(const KvCapacity& c, int64_t max_context) {
  const KvPoolBytes b = PoolBytes(c);
  std::string s = "KV cache: " + Gigabytes(b.total()) + " in pools:";
  for (const KvKind& k : c.layout.paged)
    s += " " + k.name + " " + Gigabytes(static_cast<uint64_t>(k.bytes) * static_cast<uint64_t>(c.num_blocks)) + ",";
  for (const KvKind& k : c.layout.per_request)
    s += " " + k.name + " " + Gigabytes(static_cast<uint64_t>(k.bytes) * static_cast<uint64_t>(c.num_slots)) + ",";
  s += " snapshots " + Gigabytes(b.snapshots) + " (" + std::to_string(c.num_snapshots) + ")";
  s += "; " + std::to_string(c.num_blocks) + " blocks of " + std::to_string(c.layout.block_tokens) + " tokens = " +
       std::to_string(static_cast<int64_t>(c.num_blocks) * c.layout.block_tokens) + " tokens; " +
       std::to_string(c.num_slots) + " sequences at most; requests that fit at 4K: " +
       std::to_string(RequestsThatFit(c, 4096)) + ", 128K: " + std::to_string(RequestsThatFit(c, 131072)) + ", " +
       std::to_string(max_context) + ": " + std::to_string(RequestsThatFit(c, max_context));
  return s;
}

std::string KvFingerprint(const std::string& format, const KvLayout& layout) {
  std::string s = format + ";block=" + std::to_string(layout.block_tokens) + "+" +
                  std::to_string(layout.first_entry_tokens);
  for (const KvKind& k : layout.per_request) s += ";slot:" + k.name + "=" + std::to_string(k.bytes);
  for (const KvKind& k : layout.paged) s += ";page:" + k.name + "=" + std::to_string(k.bytes);
  return s;
}

}  // namespace peregrine
