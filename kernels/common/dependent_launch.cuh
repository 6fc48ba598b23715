// Programmatic dependent launch (sm_90+): a kernel of the decode step may be scheduled while
// its predecessor in the stream is still running, so its launch, CTA rasterisation and
// prologue hide under the predecessor's tail instead of following it (in a CUDA graph the
// gap between two dependent kernels is otherwise ~1-3 us, and a batch-1 layer is ~25 of them).
//
// The contract, for every kernel launched with LaunchDependent:
// - its first statement is StartAfterPredecessor() (or WaitForPredecessor()): nothing that
//   reads what an earlier kernel wrote, or writes what an earlier kernel reads, comes before
//   it. griddepcontrol.wait returns once every predecessor grid has completed and its writes
//   are visible; an early return before it is allowed (such a CTA touches no memory).
// - what it reads before that wait must be immutable during the step (weights only).
// Without the launch attribute (older GPUs, or a predecessor that is not a kernel) both
// instructions are no-ops and stream order applies, so the same kernel is correct either way.
// A kernel that is not launched this way keeps full stream order after a dependent one.
// tests/kernels/test_dependent_launch.py checks the sources: every kernel not launched with
// <<<...>>> must call StartAfterPredecessor() or WaitForPredecessor().
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace peregrine::kernels {

// Blocks until every predecessor grid has completed and its memory is visible.
__device__ __forceinline__ void WaitForPredecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream be scheduled (it still waits for this grid's completion
// before touching memory). Once every CTA has called it or exited, the dependent grid's CTAs
// may take SM space this grid no longer needs.
__device__ __forceinline__ void AllowDependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The usual prologue: wait for the predecessor, then let the successor launch.
__device__ __forceinline__ void StartAfterPredecessor() {
  WaitForPredecessor();
  AllowDependents();
}

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;
  dim3 cluster = dim3(1, 1, 1);  // thread-block cluster (sm_90); 1 x 1 x 1 launches none
};

// Launches `kernel` so that it may overlap its predecessor's tail (see the contract above),
// with a cluster when shape.cluster is not 1 x 1 x 1. Returns the launch's error.
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), const LaunchShape& shape, cudaStream_t stream,
                            const Args&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = shape.grid;
  config.blockDim = shape.block;
  config.dynamicSmemBytes = shape.shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  unsigned num_attributes = 1;
  if (shape.cluster.x * shape.cluster.y * shape.cluster.z > 1) {
    attributes[1].id = cudaLaunchAttributeClusterDimension;
    attributes[1].val.clusterDim.x = shape.cluster.x;
    attributes[1].val.clusterDim.y = shape.cluster.y;
    attributes[1].val.clusterDim.z = shape.cluster.z;
    num_attributes = 2;
  }
  config.attrs = attributes;
  config.numAttrs = num_attributes;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

}  // namespace peregrine::kernels
