// Thread-block cluster helpers shared by the kernels that split a row's work over the CTAs of
// one cluster (sm_90; device code only). Kernels launch clusters on sm_90 and later only, so
// the older-architecture branches are never run: the barrier traps, the rank is 0.
#pragma once

#include <cooperative_groups.h>

namespace peregrine::kernels {

// Barrier over every thread of the cluster, release/acquire at cluster scope: what a CTA
// wrote to global and shared memory before it is visible to every CTA of the cluster after.
__device__ __forceinline__ void ClusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();
#endif
}

__device__ __forceinline__ int ClusterRank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  return 0;
#endif
}

// The same shared-memory object in the CTA of cluster rank `rank` (distributed shared memory).
template <typename T>
__device__ __forceinline__ T* ClusterPeer(T* local, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(local, static_cast<unsigned>(rank));
#else
  (void)rank;
  return local;
#endif
}

}  // namespace peregrine::kernels
