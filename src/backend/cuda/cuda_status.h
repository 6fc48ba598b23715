// Every CUDA runtime call goes through PG_CUDA_RETURN_IF_ERROR / CudaStatus, which maps a
// failure to a Status naming the call and the CUDA error (style rule 9).
#pragma once

#include <cuda_runtime_api.h>

#include "base/source_location.h"

#include "base/status.h"

namespace peregrine::cuda {

Status CudaStatus(cudaError_t error, const char* what,
                  const ::peregrine::SourceLocation& where = ::peregrine::SourceLocation::current());

}  // namespace peregrine::cuda

#define PG_CUDA_RETURN_IF_ERROR(call) PG_RETURN_IF_ERROR(::peregrine::cuda::CudaStatus((call), #call))
