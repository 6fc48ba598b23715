// A cuBLAS handle bound to a fixed workspace, so GEMMs issued through it never allocate
// (and can be captured in a CUDA graph). cuBLAS failures map to Status like CUDA's.
// Beside it, a cuBLASLt handle for the block-scaled FP8 GEMMs, sharing the same workspace
// (safe: the caller serialises all work through one stream at a time, see On), and a small
// host-side cache of cuBLASLt plans so a shape's heuristic query runs once.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <vector>

#include "base/source_location.h"

#include "backend/cuda/allocator.h"
#include "base/status.h"

namespace peregrine::cuda {

Status CublasStatus(cublasStatus_t status, const char* what,
                    const ::peregrine::SourceLocation& where = ::peregrine::SourceLocation::current());

// One cuBLASLt matmul set up for one shape: descriptors and the algorithm the heuristic
// chose. Pointer-valued descriptor attributes (scale pointers) are set again on every call.
struct LtMatmulPlan {
  std::array<int64_t, 6> key{};  // chosen by the op that builds the plan
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;
  cublasLtMatrixLayout_t b = nullptr;
  cublasLtMatrixLayout_t d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// Destroys whatever descriptors `plan` holds and nulls them.
void DestroyLtPlan(LtMatmulPlan& plan);

class Blas {
 public:
  // Creates the handle on the current device with a workspace from `allocator` (32 MiB is
  // what cuBLAS recommends for Hopper).
  static Result<Blas> Create(CachingAllocator& allocator, size_t workspace_bytes = size_t{32} << 20);
  Blas() = default;
  Blas(Blas&& other) noexcept { *this = std::move(other); }
  Blas& operator=(Blas&& other) noexcept;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas();

  // The handle, bound to `stream` for the calls that follow (single-threaded use).
  Result<cublasHandle_t> On(cudaStream_t stream);

  // The cuBLASLt handle (the stream is an argument of each cublasLtMatmul) and the
  // workspace it may use, shared with the cuBLAS handle.
  cublasLtHandle_t lt() const { return lt_handle_; }
  void* workspace() const { return workspace_.data(); }
  size_t workspace_bytes() const { return workspace_.capacity(); }

  // The cached plan for `key`, or null. Host only; a pointer stays valid until the next
  // AddLtPlan.
  LtMatmulPlan* FindLtPlan(const std::array<int64_t, 6>& key);
  // Takes ownership of `plan`'s descriptors; past kMaxLtPlans the oldest plan is destroyed.
  LtMatmulPlan* AddLtPlan(const LtMatmulPlan& plan);
  static constexpr size_t kMaxLtPlans = 64;

  // Batch-invariant mode (--enable-deterministic-inference): the projections issued through
  // this handle (Linear, Fp8Projection, GroupedOutputProjection) sum every output in an order
  // that does not depend on the number of rows, so a token's result is the same alone or in
  // any batch. Off by default: cuBLAS then picks its algorithm by shape.
  void set_batch_invariant(bool on) { batch_invariant_ = on; }
  bool batch_invariant() const { return batch_invariant_; }
  // The device the handle was created on (the batch-invariant kernels' K split reads them).
  int num_sms() const { return num_sms_; }
  int compute_major() const { return compute_major_; }

 private:
  void DestroyLtPlans();

  cublasHandle_t handle_ = nullptr;
  cublasLtHandle_t lt_handle_ = nullptr;
  DeviceBuffer workspace_;
  std::vector<LtMatmulPlan> lt_plans_;
  size_t lt_next_evict_ = 0;
  bool batch_invariant_ = false;
  int num_sms_ = 0;
  int compute_major_ = 0;
};

}  // namespace peregrine::cuda

#define PG_CUBLAS_RETURN_IF_ERROR(call) \
  PG_RETURN_IF_ERROR(::peregrine::cuda::CublasStatus((call), #call))
