#include "backend/cuda/ops/indexer.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/attention_args.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/indexer_scores.cuh"
#include "kernels/indexer_topk.cuh"

namespace peregrine::cuda {

namespace {

bool IsBuiltConfig(int64_t heads, int64_t dim) {
  for (const auto& c : kernels::kIndexerScoresConfigs)
    if (c.heads == heads && c.dim == dim) return true;
  return false;
}

}  // namespace

Status IndexerScores(const IndexerScoresArgs& a, cudaStream_t stream) {
  TensorChecker check("indexer_scores");
  kernels::IndexerScoresParams p;
  PG_RETURN_IF_ERROR(CheckIndexerTensors(check, a, /*q_alignment=*/16, &p));
  PG_RETURN_IF_ERROR(check.Require(IsBuiltConfig(p.heads, p.dim), "(IH, Id) = (" + std::to_string(p.heads) + ", " +
                                                                     std::to_string(p.dim) + ") is not built (64x128, 8x64)"));
  PG_RETURN_IF_ERROR(check.Require(p.batch <= kernels::kIndexerMaxBatch, "B exceeds kIndexerMaxBatch"));
  PG_RETURN_IF_ERROR(check.Require(p.score_stride % 4 == 0, "S must be a multiple of 4"));
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchIndexerScores(p, stream));
  return Status::Ok();
}

Status IndexerTopK(const IndexerTopKArgs& a, cudaStream_t stream) {
  TensorChecker check("indexer_topk");
  Dim batch("B"), stride("S"), k("K");
  PG_RETURN_IF_ERROR(check.Check("scores", a.scores, DType::kF32, {&batch, &stride}));
  PG_RETURN_IF_ERROR(check.Check("num_entries", a.num_entries, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("indices", a.indices, DType::kI32, {&batch, &k}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("counts", a.counts, DType::kI32, {&batch}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Require(k.value() >= 1 && k.value() <= kernels::kIndexerTopKMax,
                                   "K must be in [1, " + std::to_string(kernels::kIndexerTopKMax) + "]"));
  PG_RETURN_IF_ERROR(check.Require(stride.value() % 4 == 0 && stride.value() <= INT32_MAX, "S must be a multiple of 4"));
  PG_RETURN_IF_ERROR(check.Require(batch.value() <= INT32_MAX, "B overflows int32"));
  const bool has_long_rows = stride.value() > kernels::kIndexerTopKShortRow;
  Dim workspace_ints("W", kernels::kIndexerTopKWorkspaceInts);
  if (has_long_rows) {
    PG_RETURN_IF_ERROR(check.Check("workspace", a.workspace, DType::kI32, {&batch, &workspace_ints}));
    PG_RETURN_IF_ERROR(check.Require(a.num_ctas > 0 && a.num_ctas <= 65535, "num_ctas must be in [1, 65535]"));
  } else {
    PG_RETURN_IF_ERROR(check.CheckOptional("workspace", a.workspace, DType::kI32, {&batch, &workspace_ints}));
  }

  kernels::IndexerTopKParams p;
  p.scores = a.scores.as<const float>();
  p.num_entries = a.num_entries.as<const int32_t>();
  p.indices = a.indices.as<int32_t>();
  p.counts = a.counts.as<int32_t>();
  p.workspace = a.workspace.data != nullptr ? a.workspace.as<int32_t>() : nullptr;
  p.batch = static_cast<int>(batch.value());
  p.score_stride = static_cast<int>(stride.value());
  p.k = static_cast<int>(k.value());
  p.num_slices = kernels::IndexerTopKSlices(p.batch, a.num_ctas);
  p.phase_stamps = a.phase_stamps;
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchIndexerTopK(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
