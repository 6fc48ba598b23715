#include "backend/cuda/ops/sparse_attention_plan.h"

#include <algorithm>
#include <string>

namespace peregrine::cuda {

kernels::SparseAttentionScheduleLayout SparseAttentionLayout(int num_ctas, int max_batch) {
  kernels::SparseAttentionScheduleLayout layout;
  layout.num_ctas = num_ctas;
  layout.max_segments = num_ctas + max_batch;
  layout.max_batch = max_batch;
  return layout;
}

Status PlanSparseAttention(std::span<const int64_t> rows, const kernels::SparseAttentionScheduleLayout& layout,
                           std::span<int32_t> schedule, bool whole_requests) {
  constexpr int64_t kBlockN = kernels::kSparseAttentionBlockN;
  const int64_t batch = static_cast<int64_t>(rows.size());
  if (layout.num_ctas < 1 || layout.max_segments < layout.num_ctas + layout.max_batch)
    return InvalidArgument("sparse attention plan: malformed layout");
  if (batch > layout.max_batch)
    return InvalidArgument("sparse attention plan: batch " + std::to_string(batch) + " exceeds max_batch " +
                           std::to_string(layout.max_batch));
  if (static_cast<int64_t>(schedule.size()) != layout.num_ints())
    return InvalidArgument("sparse attention plan: schedule has " + std::to_string(schedule.size()) +
                           " entries, the layout needs " + std::to_string(layout.num_ints()));
  int64_t total_tiles = 0;
  for (int64_t r : rows) {
    if (r < 0 || r > INT32_MAX) return InvalidArgument("sparse attention plan: row count out of range");
    total_tiles += (r + kBlockN - 1) / kBlockN;
  }
  std::fill(schedule.begin(), schedule.end(), 0);
  int32_t* cta_begin = schedule.data();
  int32_t* segments = schedule.data() + layout.segments_offset();
  int32_t* requests = schedule.data() + layout.requests_offset();
  int32_t* combine = schedule.data() + layout.combine_offset();  // [count, requests...]

  const int64_t per_cta = std::max<int64_t>(1, (total_tiles + layout.num_ctas - 1) / layout.num_ctas);
  int cta = 0;
  int64_t used = 0;  // tiles given to the current CTA
  int num_segments = 0;
  int next_slot = 0;
  cta_begin[0] = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t tiles = (rows[static_cast<size_t>(b)] + kBlockN - 1) / kBlockN;
    const int first_segment = num_segments;
    for (int64_t t = 0; t < tiles;) {
      // Whole requests: a CTA takes a request however much it holds already, and moves on
      // once it has its share, so at most ceil(total / per_cta) <= num_ctas CTAs are used.
      const int64_t take = whole_requests ? tiles : std::min(tiles - t, per_cta - used);
      if (take <= 0 || num_segments >= layout.max_segments) return Internal("sparse attention plan: overflow");
      int32_t* seg = segments + 4 * num_segments;
      seg[0] = static_cast<int32_t>(b);
      seg[1] = static_cast<int32_t>(t * kBlockN);
      seg[2] = static_cast<int32_t>(std::min(rows[static_cast<size_t>(b)], (t + take) * kBlockN));
      seg[3] = -1;
      ++num_segments;
      t += take;
      used += take;
      if (used >= per_cta && cta < layout.num_ctas) {
        cta_begin[++cta] = num_segments;
        used = 0;
      }
    }
    const int count = num_segments - first_segment;
    int32_t* info = requests + 2 * b;
    if (count == 1) {
      info[0] = 0;
      info[1] = -1;  // direct
    } else {
      info[0] = next_slot;
      info[1] = count;  // 0: no rows, the combine writes zeros
      for (int s = first_segment; s < num_segments; ++s) segments[4 * s + 3] = next_slot++;
      combine[1 + combine[0]++] = static_cast<int32_t>(b);
    }
  }
  for (int c = cta + 1; c <= layout.num_ctas; ++c) cta_begin[c] = num_segments;
  return Status::Ok();
}

}  // namespace peregrine::cuda
