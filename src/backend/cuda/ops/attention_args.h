// Argument checks shared by the fast and the shape-generic launchers of the same op: the
// tensors both read, checked once here so the two entry points cannot drift apart. Host
// code only.
#pragma once

#include <cstdint>

#include "backend/cuda/ops/indexer.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/indexer_scores.cuh"
#include "kernels/sparse_attention.cuh"

namespace peregrine::cuda {

// q, the window rows, the compressed rows (when present), sink, positions, the RoPE tables
// (when present) and out: checks them and fills the matching fields of `p` (the schedule,
// layout and partials are the fast launcher's own).
Status CheckAttentionTensors(TensorChecker& check, const SparseAttentionArgs& a, kernels::SparseAttentionParams* p);

// q, weights, keys, page_table, num_entries, scores and num_ctas: checks them and fills `p`.
// `q_alignment`: 16 for the fast kernel's 16-byte row loads, 4 for the generic one.
Status CheckIndexerTensors(TensorChecker& check, const IndexerScoresArgs& a, int64_t q_alignment,
                           kernels::IndexerScoresParams* p);

}  // namespace peregrine::cuda
