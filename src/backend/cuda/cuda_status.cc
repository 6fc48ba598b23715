#include "backend/cuda/cuda_status.h"

#include <string>

namespace peregrine::cuda {

Status CudaStatus(cudaError_t error, const char* what, const ::peregrine::SourceLocation& where) {
  if (error == cudaSuccess) return Status::Ok();
  std::string message = std::string(what) + " failed: " + cudaGetErrorName(error) + " (" +
                        cudaGetErrorString(error) + ") at " + where.file_name() + ":" +
                        std::to_string(where.line());
  // Sticky errors (a fault inside a kernel) poison the context: the device is unusable.
  const bool sticky = error == cudaErrorIllegalAddress || error == cudaErrorLaunchFailure ||
                      error == cudaErrorMisalignedAddress || error == cudaErrorIllegalInstruction;
  return {sticky ? StatusCode::kUnavailable : StatusCode::kInternal, std::move(message)};
}

}  // namespace peregrine::cuda
