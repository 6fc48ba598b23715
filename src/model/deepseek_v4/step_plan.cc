#include "model/deepseek_v4/step_plan.h"

#include <algorithm>
#include <string>

namespace peregrine::deepseek_v4 {

int64_t MaxSnapshotsPerChunk(int64_t max_chunk_tokens, int64_t block_tokens) {
  return block_tokens > 0 ? max_chunk_tokens / block_tokens + 1 : 1;
}

namespace {

Status CheckChunk(const ChunkView& chunk, const StepLimits& limits, int64_t window) {
  const int64_t t_n = chunk.num_tokens;
  if (t_n <= 0) return InvalidArgument("step chunk with no tokens");
  if (static_cast<int64_t>(chunk.tokens.size()) + (chunk.feeds_last ? 1 : 0) != t_n)
    return InvalidArgument("a step chunk's tokens and length disagree");
  if (chunk.slot < 0 || chunk.slot >= limits.num_slots)
    return InvalidArgument("state slot out of range: " + std::to_string(chunk.slot));
  // A draft tree reaches its deepest node's position only.
  const int64_t end = chunk.first_position + chunk.span();
  if (chunk.first_position < 0 || end > limits.max_context)
    return InvalidArgument("sequence longer than the context the device state holds (" +
                           std::to_string(limits.max_context) + ")");
  const int64_t b = limits.block_tokens;
  if (b > 0) {
    const int64_t needed = end >= limits.first_entry_tokens ? (end - limits.first_entry_tokens) / b + 1 : 0;
    if (static_cast<int64_t>(chunk.blocks.size()) < needed)
      return InvalidArgument("the block table does not cover the chunk");
    for (int32_t id : chunk.blocks.first(static_cast<size_t>(needed)))
      if (id < 0 || id >= limits.num_blocks) return InvalidArgument("block id outside the pools");
    const int64_t boundaries = end / b - chunk.first_position / b;
    if (static_cast<int64_t>(chunk.snapshots.size()) > boundaries)
      return InvalidArgument("more snapshots than block boundaries in the chunk");
    // A snapshot inside the chunk copies the window from the step's own rows: they must hold
    // all W positions before the boundary (the scheduler aligns chunks so they do).
    for (size_t i = 0; i < chunk.snapshots.size(); ++i) {
      const int64_t boundary = (chunk.first_position / b + 1 + static_cast<int64_t>(i)) * b;
      if (chunk.snapshots[i] >= 0 && boundary < end && boundary - window < chunk.first_position)
        return InvalidArgument("a snapshot inside a chunk less than a window after its start");
    }
  }
  for (int32_t s : chunk.snapshots)
    if (s >= limits.num_snapshots) return InvalidArgument("snapshot id outside the pools");
  if (!chunk.tree_parents.empty()) {
    if (static_cast<int64_t>(chunk.tree_parents.size()) != t_n)
      return InvalidArgument("a draft tree needs one parent per token");
    if (chunk.tree_parents[0] != -1) return InvalidArgument("a draft tree's first node is its root");
    for (int64_t i = 1; i < t_n; ++i) {
      const int32_t parent = chunk.tree_parents[static_cast<size_t>(i)];
      if (parent < 0 || parent >= i) return InvalidArgument("a draft tree node's parent must come before it");
    }
    if (chunk.restore >= 0) return InvalidArgument("a draft tree cannot restore its slot");
    for (int32_t s : chunk.snapshots)
      if (s >= 0) return InvalidArgument("a draft tree passes no block boundary that takes a snapshot");
    if (chunk.span() - 1 > limits.max_tree_depth)
      return InvalidArgument("a draft tree deeper than the device verifies (" + std::to_string(limits.max_tree_depth) +
                             ")");
  }
  if (chunk.restore >= limits.num_snapshots || (chunk.restore >= 0 && (b <= 0 || chunk.first_position % b != 0)))
    return InvalidArgument("a restore must name a snapshot taken at a block boundary");
  return Status::Ok();
}

}  // namespace

Result<StepPlan> PlanStep(std::span<const ChunkView> chunks, const ModelConfig& c, const StepLimits& limits) {
  const int64_t w = c.sliding_window;
  int64_t n = 0, longest = 0;
  std::vector<bool> slot_used(static_cast<size_t>(limits.num_slots), false);
  for (const ChunkView& chunk : chunks) {
    PG_RETURN_IF_ERROR(CheckChunk(chunk, limits, c.sliding_window));
    if (slot_used[static_cast<size_t>(chunk.slot)])
      return InvalidArgument("state slot used twice in one step: " + std::to_string(chunk.slot));
    slot_used[static_cast<size_t>(chunk.slot)] = true;
    n += chunk.num_tokens;
    longest = std::max(longest, chunk.num_tokens);
  }
  if (n > limits.max_tokens)
    return InvalidArgument("step of " + std::to_string(n) + " tokens exceeds " + std::to_string(limits.max_tokens));

  StepPlan p;
  p.num_tokens = n;
  p.num_chunks = static_cast<int64_t>(chunks.size());
  p.max_chunk_tokens = longest;
  p.max_snapshots = MaxSnapshotsPerChunk(longest, limits.block_tokens);
  const auto un = static_cast<size_t>(n);
  p.token_ids.reserve(un);
  p.positions.reserve(un);
  p.token_slots.reserve(un);
  p.window_indices.assign(un * static_cast<size_t>(w), -1);
  p.window_lengths.reserve(un);
  p.ring_src.assign(un, -1);
  p.ring_dst.assign(un, -1);
  p.csa_entries.reserve(un);
  p.hca_entries.reserve(un);
  p.sliding_rows.reserve(un);
  p.csa_rows.reserve(un);
  p.hca_rows.reserve(un);
  p.chunk_offsets.push_back(0);
  p.snapshot_table.assign(chunks.size() * static_cast<size_t>(p.max_snapshots), -1);
  const bool any_tree = std::any_of(chunks.begin(), chunks.end(), [](const ChunkView& v) { return !v.tree_parents.empty(); });
  const int64_t csa_ratio = c.compress_ratio_csa, hca_ratio = c.compress_ratio_hca;
  if (any_tree) {
    p.path_capacity = limits.max_tree_depth + 1;
    p.tree_rows.assign(un, -1);
    p.tree_paths.assign(un * static_cast<size_t>(p.path_capacity), -1);
    p.csa_staged_capacity = csa_ratio > 0 ? p.path_capacity / csa_ratio + 1 : 0;
    p.hca_staged_capacity = hca_ratio > 0 ? p.path_capacity / hca_ratio + 1 : 0;
    p.csa_staged.assign(un * static_cast<size_t>(p.csa_staged_capacity), -1);
    p.hca_staged.assign(un * static_cast<size_t>(p.hca_staged_capacity), -1);
    p.csa_staged_first.reserve(un);
    p.hca_staged_first.reserve(un);
  }

  const int64_t scratch = limits.num_slots * w;  // first scratch row
  int64_t row = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ChunkView& chunk = chunks[ci];
    const int64_t t_n = chunk.num_tokens;
    const int64_t p0 = chunk.first_position;
    const bool verify = !chunk.tree_parents.empty();
    // A tree's nodes: depth and path (step rows by depth, root first).
    std::vector<int64_t> depth(static_cast<size_t>(verify ? t_n : 0), 0);
    if (verify) {
      if (p.num_stage_rows + t_n > limits.max_stage_rows)
        return InvalidArgument("a step verifies more draft tokens than the device holds (" +
                               std::to_string(limits.max_stage_rows) + ")");
      p.verify_chunks.push_back({static_cast<int64_t>(ci), row, p.num_stage_rows});
      for (int64_t i = 0; i < t_n; ++i) {
        const auto ui = static_cast<size_t>(i);
        const int32_t parent = chunk.tree_parents[ui];
        depth[ui] = parent < 0 ? 0 : depth[static_cast<size_t>(parent)] + 1;
        int32_t* path = p.tree_paths.data() + (row + i) * p.path_capacity;
        for (int64_t node = i; node >= 0; node = chunk.tree_parents[static_cast<size_t>(node)])
          path[depth[static_cast<size_t>(node)]] = static_cast<int32_t>(row + node);
        p.tree_rows[static_cast<size_t>(row + i)] = static_cast<int32_t>(p.num_stage_rows + i);
      }
      p.num_stage_rows += t_n;
    }
    p.chunk_positions.push_back(static_cast<int32_t>(p0));
    p.chunk_slots.push_back(chunk.slot);
    std::copy(chunk.snapshots.begin(), chunk.snapshots.end(),
              p.snapshot_table.begin() + static_cast<int64_t>(ci) * p.max_snapshots);
    p.compress_slots.push_back(verify ? -1 : chunk.slot);
    for (int64_t i = 0; i < t_n; ++i) {
      const int64_t t = row + i;
      const int64_t pos = p0 + (verify ? depth[static_cast<size_t>(i)] : i);
      const int32_t* path = verify ? p.tree_paths.data() + t * p.path_capacity : nullptr;
      p.token_ids.push_back(i < static_cast<int64_t>(chunk.tokens.size()) ? chunk.tokens[static_cast<size_t>(i)] : 0);
      p.positions.push_back(static_cast<int32_t>(pos));
      p.token_slots.push_back(chunk.slot);
      int32_t* win = p.window_indices.data() + t * w;
      int64_t len = 0;
      for (int64_t q = std::max<int64_t>(0, pos - w + 1); q <= pos; ++q) {
        if (q < p0) {
          win[len++] = static_cast<int32_t>(chunk.slot * w + q % w);
        } else {
          const int64_t own = verify ? path[q - p0] : row + (q - p0);  // the step row of position q
          win[len++] = static_cast<int32_t>(scratch + own);
        }
      }
      p.window_lengths.push_back(static_cast<int32_t>(len));
      if (i >= t_n - w && !verify) {
        p.ring_src[static_cast<size_t>(t)] = static_cast<int32_t>(scratch + t);
        p.ring_dst[static_cast<size_t>(t)] = static_cast<int32_t>(chunk.slot * w + pos % w);
      }
      const int64_t csa = csa_ratio > 0 ? (pos + 1) / csa_ratio : 0;
      const int64_t hca = hca_ratio > 0 ? (pos + 1) / hca_ratio : 0;
      p.csa_entries.push_back(static_cast<int32_t>(csa));
      p.hca_entries.push_back(static_cast<int32_t>(hca));
      if (any_tree) {
        // Entries completed at positions >= p0 are the path's staged ones: entry k by the
        // node at depth (k + 1) * ratio - 1 - p0.
        auto stage = [&](int64_t ratio, int64_t entries, int64_t capacity, std::vector<int32_t>& first,
                         std::vector<int32_t>& table) {
          if (!verify || ratio <= 0) {
            first.push_back(static_cast<int32_t>(entries));
            return;
          }
          const int64_t k0 = p0 / ratio;
          first.push_back(static_cast<int32_t>(k0));
          for (int64_t k = k0; k < entries && k - k0 < capacity; ++k) {
            const int64_t at = (k + 1) * ratio - 1 - p0;
            table[static_cast<size_t>(t * capacity + (k - k0))] =
                p.tree_rows[static_cast<size_t>(path[at])];
          }
        };
        stage(csa_ratio, csa, p.csa_staged_capacity, p.csa_staged_first, p.csa_staged);
        stage(hca_ratio, hca, p.hca_staged_capacity, p.hca_staged_first, p.hca_staged);
      }
      p.max_csa_entries = std::max(p.max_csa_entries, csa);
      p.sliding_rows.push_back(len);
      p.csa_rows.push_back(len + std::min(c.index_topk, csa));
      p.hca_rows.push_back(len + hca);
    }
    if (chunk.all_logits || verify) {
      for (int64_t i = 0; i < t_n; ++i) p.logit_rows.push_back(static_cast<int32_t>(row + i));
    } else if (chunk.needs_logits) {
      p.logit_rows.push_back(static_cast<int32_t>(row + t_n - 1));
    }
    row += t_n;
    p.chunk_offsets.push_back(static_cast<int32_t>(row));
  }
  return p;
}

}  // namespace peregrine::deepseek_v4
