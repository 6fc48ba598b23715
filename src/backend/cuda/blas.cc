#include "backend/cuda/blas.h"

#include <string>

namespace peregrine::cuda {

Status CublasStatus(cublasStatus_t status, const char* what, const ::peregrine::SourceLocation& where) {
  if (status == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  std::string message = std::string(what) + " failed: " + cublasGetStatusName(status) + " (" +
                        cublasGetStatusString(status) + ") at " + where.file_name() + ":" +
                        std::to_string(where.line());
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return {StatusCode::kResourceExhausted, std::move(message)};
    case CUBLAS_STATUS_INVALID_VALUE:
      return {StatusCode::kInvalidArgument, std::move(message)};
    case CUBLAS_STATUS_NOT_SUPPORTED:
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return {StatusCode::kUnimplemented, std::move(message)};
    default:
      return {StatusCode::kInternal, std::move(message)};
  }
}

Result<Blas> Blas::Create(CachingAllocator& allocator, size_t workspace_bytes) {
  Blas blas;
  PG_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas.handle_));
  PG_ASSIGN_OR_RETURN(blas.workspace_, allocator.Allocate(workspace_bytes));
  PG_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(blas.handle_, blas.workspace_.data(), blas.workspace_.capacity()));
  return blas;
}

Blas& Blas::operator=(Blas&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    handle_ = other.handle_;
    workspace_ = std::move(other.workspace_);
    other.handle_ = nullptr;
  }
  return *this;
}

Blas::~Blas() {
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
}

Result<cublasHandle_t> Blas::On(cudaStream_t stream) {
  if (handle_ == nullptr) return Internal("Blas used before Create");
  PG_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle_, stream));
  // cublasSetStream resets the workspace to the default pool; bind ours again.
  PG_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(handle_, workspace_.data(), workspace_.capacity()));
  return handle_;
}

}  // namespace peregrine::cuda
