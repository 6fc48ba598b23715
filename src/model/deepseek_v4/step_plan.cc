#include "model/deepseek_v4/step_plan.h"

#include <algorithm>
#include <string>

namespace peregrine::deepseek_v4 {

Result<StepPlan> PlanStep(std::span<const StepChunk> chunks, const ModelConfig& c, const StepLimits& limits) {
  const int64_t w = c.sliding_window;
  int64_t n = 0;
  std::vector<bool> slot_used(static_cast<size_t>(limits.num_slots), false);
  for (const StepChunk& chunk : chunks) {
    if (chunk.tokens.empty()) return InvalidArgument("step chunk with no tokens");
    if (chunk.slot < 0 || chunk.slot >= limits.num_slots)
      return InvalidArgument("state slot out of range: " + std::to_string(chunk.slot));
    if (slot_used[static_cast<size_t>(chunk.slot)])
      return InvalidArgument("state slot used twice in one step: " + std::to_string(chunk.slot));
    slot_used[static_cast<size_t>(chunk.slot)] = true;
    if (chunk.first_position < 0 ||
        chunk.first_position + static_cast<int64_t>(chunk.tokens.size()) > limits.max_context)
      return InvalidArgument("sequence longer than the context the device state holds (" +
                             std::to_string(limits.max_context) + ")");
    n += static_cast<int64_t>(chunk.tokens.size());
  }
  if (n > limits.max_tokens)
    return InvalidArgument("step of " + std::to_string(n) + " tokens exceeds " + std::to_string(limits.max_tokens));

  StepPlan p;
  p.num_tokens = n;
  p.num_chunks = static_cast<int64_t>(chunks.size());
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

  const int64_t scratch = limits.num_slots * w;  // first scratch row
  int64_t row = 0;
  for (const StepChunk& chunk : chunks) {
    const int64_t t_n = static_cast<int64_t>(chunk.tokens.size());
    const int64_t p0 = chunk.first_position;
    p.chunk_positions.push_back(static_cast<int32_t>(p0));
    p.chunk_slots.push_back(chunk.slot);
    for (int64_t i = 0; i < t_n; ++i) {
      const int64_t t = row + i;
      const int64_t pos = p0 + i;
      p.token_ids.push_back(chunk.tokens[static_cast<size_t>(i)]);
      p.positions.push_back(static_cast<int32_t>(pos));
      p.token_slots.push_back(chunk.slot);
      int32_t* win = p.window_indices.data() + t * w;
      int64_t len = 0;
      for (int64_t q = std::max<int64_t>(0, pos - w + 1); q <= pos; ++q)
        win[len++] = static_cast<int32_t>(q < p0 ? chunk.slot * w + q % w : scratch + row + (q - p0));
      p.window_lengths.push_back(static_cast<int32_t>(len));
      if (i >= t_n - w) {
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
    if (chunk.all_logits) {
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
