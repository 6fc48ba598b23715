// A cuBLAS handle bound to a fixed workspace, so GEMMs issued through it never allocate
// (and can be captured in a CUDA graph). cuBLAS failures map to Status like CUDA's.
#pragma once

#include <cublas_v2.h>

#include "base/source_location.h"

#include "backend/cuda/allocator.h"
#include "base/status.h"

namespace peregrine::cuda {

Status CublasStatus(cublasStatus_t status, const char* what,
                    const ::peregrine::SourceLocation& where = ::peregrine::SourceLocation::current());

class Blas {
 public:
  // Creates the handle on the current device with a workspace from `allocator` (32 MiB is
  // what cuBLAS recommends for Hopper).
  static Result<Blas> Create(CachingAllocator& allocator, size_t workspace_bytes = size_t{32} << 20);
  Blas() = default;
  Blas(Blas&& other) noexcept : handle_(other.handle_), workspace_(std::move(other.workspace_)) {
    other.handle_ = nullptr;
  }
  Blas& operator=(Blas&& other) noexcept;
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  ~Blas();

  // The handle, bound to `stream` for the calls that follow (single-threaded use).
  Result<cublasHandle_t> On(cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer workspace_;
};

}  // namespace peregrine::cuda

#define PG_CUBLAS_RETURN_IF_ERROR(call) \
  PG_RETURN_IF_ERROR(::peregrine::cuda::CublasStatus((call), #call))
