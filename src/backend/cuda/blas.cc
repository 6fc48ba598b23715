#include "backend/cuda/blas.h"

#include <string>

#include "backend/cuda/cuda_status.h"

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

void DestroyLtPlan(LtMatmulPlan& plan) {
  if (plan.d != nullptr) (void)cublasLtMatrixLayoutDestroy(plan.d);
  if (plan.b != nullptr) (void)cublasLtMatrixLayoutDestroy(plan.b);
  if (plan.a != nullptr) (void)cublasLtMatrixLayoutDestroy(plan.a);
  if (plan.desc != nullptr) (void)cublasLtMatmulDescDestroy(plan.desc);
  plan.d = plan.b = plan.a = nullptr;
  plan.desc = nullptr;
}

Result<Blas> Blas::Create(CachingAllocator& allocator, size_t workspace_bytes) {
  Blas blas;
  PG_CUBLAS_RETURN_IF_ERROR(cublasCreate(&blas.handle_));
  PG_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&blas.lt_handle_));
  blas.lt_plans_.reserve(kMaxLtPlans);
  PG_ASSIGN_OR_RETURN(blas.workspace_, allocator.Allocate(workspace_bytes));
  PG_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(blas.handle_, blas.workspace_.data(), blas.workspace_.capacity()));
  int device = 0;
  PG_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  PG_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&blas.num_sms_, cudaDevAttrMultiProcessorCount, device));
  PG_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&blas.compute_major_, cudaDevAttrComputeCapabilityMajor, device));
  return blas;
}

Blas& Blas::operator=(Blas&& other) noexcept {
  if (this != &other) {
    DestroyLtPlans();
    if (lt_handle_ != nullptr) (void)cublasLtDestroy(lt_handle_);
    if (handle_ != nullptr) (void)cublasDestroy(handle_);
    handle_ = other.handle_;
    lt_handle_ = other.lt_handle_;
    workspace_ = std::move(other.workspace_);
    lt_plans_ = std::move(other.lt_plans_);
    lt_next_evict_ = other.lt_next_evict_;
    batch_invariant_ = other.batch_invariant_;
    num_sms_ = other.num_sms_;
    compute_major_ = other.compute_major_;
    other.handle_ = nullptr;
    other.lt_handle_ = nullptr;
    other.lt_plans_.clear();
    other.lt_next_evict_ = 0;
  }
  return *this;
}

Blas::~Blas() {
  DestroyLtPlans();
  if (lt_handle_ != nullptr) (void)cublasLtDestroy(lt_handle_);
  if (handle_ != nullptr) (void)cublasDestroy(handle_);
}

void Blas::DestroyLtPlans() {
  for (LtMatmulPlan& plan : lt_plans_) DestroyLtPlan(plan);
  lt_plans_.clear();
  lt_next_evict_ = 0;
}

LtMatmulPlan* Blas::FindLtPlan(const std::array<int64_t, 6>& key) {
  for (LtMatmulPlan& plan : lt_plans_)
    if (plan.key == key) return &plan;
  return nullptr;
}

LtMatmulPlan* Blas::AddLtPlan(const LtMatmulPlan& plan) {
  if (lt_plans_.size() < kMaxLtPlans) {
    lt_plans_.push_back(plan);
    return &lt_plans_.back();
  }
  LtMatmulPlan& slot = lt_plans_[lt_next_evict_];
  lt_next_evict_ = (lt_next_evict_ + 1) % kMaxLtPlans;
  DestroyLtPlan(slot);
  slot = plan;
  return &slot;
}

Result<cublasHandle_t> Blas::On(cudaStream_t stream) {
  if (handle_ == nullptr) return Internal("Blas used before Create");
  PG_CUBLAS_RETURN_IF_ERROR(cublasSetStream(handle_, stream));
  // cublasSetStream resets the workspace to the default pool; bind ours again.
  PG_CUBLAS_RETURN_IF_ERROR(cublasSetWorkspace(handle_, workspace_.data(), workspace_.capacity()));
  return handle_;
}

}  // namespace peregrine::cuda
