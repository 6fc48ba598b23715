// Host planning for the sparse attention decode: which CTA processes which 64-row tiles of
// which request. Computed once per step per layer kind (window-only, CSA, HCA share it
// across layers), copied into the fixed device schedule buffer, and reused by every layer
// and by graph replays. Host code only.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"
#include "kernels/sparse_attention.cuh"

namespace peregrine::cuda {

// The schedule buffer's shape for `num_ctas` CTAs (normally the SM count) and up to
// `max_batch` requests: each CTA boundary and each request start adds at most one segment.
kernels::SparseAttentionScheduleLayout SparseAttentionLayout(int num_ctas, int max_batch);

// Fills `schedule` (layout.num_ints() entries) for requests with `rows[b]` key/value rows
// each (window + compressed, as the device lengths will say). The batch's tiles are cut into
// equal contiguous runs, one per CTA, so a lone long request spreads over every SM and a
// large batch gives each CTA whole requests. Requests done by one CTA are written directly;
// split ones (and empty ones, whose output is zero) are listed for the combine kernel.
// InvalidArgument when the batch exceeds the layout or a
// row count is negative.
//
// `whole_requests` (batch-invariant mode, --enable-deterministic-inference): no request is
// split; each is one segment written directly by one CTA, its tiles in order, and CTAs take
// whole requests until they hold their share. A request's output then depends on its own
// rows only, whatever the batch around it (a split request's would depend on where the
// batch's CTA boundaries fall); a lone long request runs on one SM.
Status PlanSparseAttention(std::span<const int64_t> rows, const kernels::SparseAttentionScheduleLayout& layout,
                           std::span<int32_t> schedule, bool whole_requests = false);

}  // namespace peregrine::cuda
