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
  if (chunk.first_position < 0 || chunk.first_position + t_n > limits.max_context)
    return InvalidArgument("sequence longer than the context the device state holds (" +
                           std::to_string(limits.max_context) + ")");
  const int64_t end = chunk.first_position + t_n;
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
    for (int64_t i = 0; i < t_n; ++i)
      if (chunk.tree_parents[static_cast<size_t>(i)] != i - 1)
        return InvalidArgument("the device backend verifies draft chains only (each node the child of the one before)");
    if (chunk.restore >= 0) return InvalidArgument("a draft chain cannot restore its slot");
    for (int32_t s : chunk.snapshots)
      if (s >= 0) return InvalidArgument("a draft chain passes no block boundary that takes a snapshot");
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
  p.save_rows.assign(un, -1);

  const int64_t scratch = limits.num_slots * w;  // first scratch row
  int64_t row = 0;
  for (size_t ci = 0; ci < chunks.size(); ++ci) {
    const ChunkView& chunk = chunks[ci];
    const int64_t t_n = chunk.num_tokens;
    const int64_t p0 = chunk.first_position;
    const bool verify = !chunk.tree_parents.empty();
    if (verify) {
      if (p.num_save_rows + t_n > limits.max_save_rows)
        return InvalidArgument("a step verifies more draft tokens than the device holds (" +
                               std::to_string(limits.max_save_rows) + ")");
      p.verify_chunks.push_back({static_cast<int64_t>(ci), row, p.num_save_rows});
      for (int64_t i = 0; i < t_n; ++i) p.save_rows[static_cast<size_t>(row + i)] = static_cast<int32_t>(p.num_save_rows + i);
      p.num_save_rows += t_n;
    }
    p.chunk_positions.push_back(static_cast<int32_t>(p0));
    p.chunk_slots.push_back(chunk.slot);
    std::copy(chunk.snapshots.begin(), chunk.snapshots.end(),
              p.snapshot_table.begin() + static_cast<int64_t>(ci) * p.max_snapshots);
    for (int64_t i = 0; i < t_n; ++i) {
      const int64_t t = row + i;
      const int64_t pos = p0 + i;
      p.token_ids.push_back(i < static_cast<int64_t>(chunk.tokens.size()) ? chunk.tokens[static_cast<size_t>(i)] : 0);
      p.positions.push_back(static_cast<int32_t>(pos));
      p.token_slots.push_back(chunk.slot);
      int32_t* win = p.window_indices.data() + t * w;
      int64_t len = 0;
      for (int64_t q = std::max<int64_t>(0, pos - w + 1); q <= pos; ++q)
        win[len++] = static_cast<int32_t>(q < p0 ? chunk.slot * w + q % w : scratch + row + (q - p0));
      p.window_lengths.push_back(static_cast<int32_t>(len));
      if (i >= t_n - w && !verify) {
        p.ring_src[static_cast<size_t>(t)] = static_cast<int32_t>(scratch + t);
        p.ring_dst[static_cast<size_t>(t)] = static_cast<int32_t>(chunk.slot * w + pos % w);
      }
      const int64_t csa = c.compress_ratio_csa > 0 ? (pos + 1) / c.compress_ratio_csa : 0;
      const int64_t hca = c.compress_ratio_hca > 0 ? (pos + 1) / c.compress_ratio_hca : 0;
      p.csa_entries.push_back(static_cast<int32_t>(csa));
      p.hca_entries.push_back(static_cast<int32_t>(hca));
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
