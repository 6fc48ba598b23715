#include "backend/cuda/ops/embedding.h"

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/embedding.cuh"

namespace peregrine::cuda {

Status EmbeddingLookup(const EmbeddingArgs& a, cudaStream_t stream) {
  TensorChecker check("embedding_lookup");
  Dim n("N"), v("V"), d("D"), hc("hc");
  PG_RETURN_IF_ERROR(check.Check("token_ids", a.token_ids, DType::kI32, {&n}, Device::kCuda, 4));
  PG_RETURN_IF_ERROR(check.Check("table", a.table, DType::kBF16, {&v, &d}));
  PG_RETURN_IF_ERROR(check.Check("streams", a.streams, DType::kF32, {&n, &hc, &d}));
  PG_RETURN_IF_ERROR(check.Require(d.value() > 0 && d.value() % 8 == 0 && d.value() <= (int64_t{1} << 30),
                                   "D a positive multiple of 8"));
  PG_RETURN_IF_ERROR(check.Require(hc.value() >= 1 && hc.value() <= 64, "hc in [1, 64]"));

  kernels::EmbeddingParams p;
  p.token_ids = a.token_ids.as<const int32_t>();
  p.table = a.table.data;
  p.streams = a.streams.as<float>();
  p.num_tokens = n.value();
  p.vocab_size = v.value();
  p.hc = static_cast<int>(hc.value());
  p.dim = static_cast<int>(d.value());
  PG_CUDA_RETURN_IF_ERROR(kernels::LaunchEmbedding(p, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
