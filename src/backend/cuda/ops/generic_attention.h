// Shape-generic attention-path ops, for the shapes the fast kernels are not built for (see
// kernels/generic_attention.cuh): the same arguments and results as SparseAttentionDecode and
// IndexerScores, any head count and head dim, any batch (prefill passes one row per token).
// Simple kernels, capture-safe: the grid depends on host-known sizes only.
#pragma once

#include <cuda_runtime_api.h>

#include "backend/cuda/ops/indexer.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "base/status.h"

namespace peregrine::cuda {

// SparseAttentionDecode's semantics (kernels/sparse_attention.cuh) for any H >= 1 and any
// even D <= kernels::kGenericAttentionMaxDim, any B; schedule, layout, partial_o and
// partial_lse are ignored (may be absent). InvalidArgument for bad tensors or an unsupported
// D; Internal when the launch fails. Asynchronous on `stream`; needs no Prepare call.
Status SparseAttentionGeneric(const SparseAttentionArgs& args, cudaStream_t stream);

// IndexerScores' semantics for any (IH, Id) with Id even and
// kernels::GenericIndexerSharedBytes(IH, Id) within kernels::kGenericIndexerMaxSharedBytes
// (64 x 128 fits), any B. The num_ctas CTAs walk the real num_entries only. InvalidArgument
// for bad tensors or an unsupported shape; Internal when the launch fails. Asynchronous.
Status IndexerScoresGeneric(const IndexerScoresArgs& args, cudaStream_t stream);

}  // namespace peregrine::cuda
