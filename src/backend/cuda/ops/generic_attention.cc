#include "backend/cuda/ops/generic_attention.h"

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/attention_args.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/generic_attention.cuh"

namespace peregrine::cuda {

Status SparseAttentionGeneric(const SparseAttentionArgs& a, cudaStream_t stream) {
  TensorChecker check("sparse_attention_generic");
  kernels::SparseAttentionParams p{};
  // bf16 rows are read with 16-byte loads when D % 8 == 0: bases stay 16-byte aligned.
  PG_RETURN_IF_ERROR(CheckAttentionTensors(check, a, &p));
  PG_RETURN_IF_ERROR(check.Require(p.head_dim >= 2 && p.head_dim % 2 == 0 &&
                                       p.head_dim <= kernels::kGenericAttentionMaxDim,
                                   "D must be even and in [2, " + std::to_string(kernels::kGenericAttentionMaxDim) +
                                       "], got " + std::to_string(p.head_dim)));
  PG_RETURN_IF_ERROR(check.Require(p.heads >= 1 && p.heads <= 65535, "H must be in [1, 65535]"));
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchSparseAttentionGeneric(p, stream));
  return Status::Ok();
}

Status IndexerScoresGeneric(const IndexerScoresArgs& a, cudaStream_t stream) {
  TensorChecker check("indexer_scores_generic");
  kernels::IndexerScoresParams p{};
  PG_RETURN_IF_ERROR(CheckIndexerTensors(check, a, /*q_alignment=*/4, &p));
  PG_RETURN_IF_ERROR(check.Require(p.heads >= 1 && p.dim >= 2 && p.dim % 2 == 0, "IH must be positive and Id even"));
  PG_RETURN_IF_ERROR(check.Require(
      kernels::GenericIndexerSharedBytes(p.heads, p.dim) <= kernels::kGenericIndexerMaxSharedBytes,
      "(IH, Id) = (" + std::to_string(p.heads) + ", " + std::to_string(p.dim) +
          ") needs more shared memory than the generic indexer has"));
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchIndexerScoresGeneric(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
