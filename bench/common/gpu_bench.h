// Helpers the GPU microbenchmarks share: fail-fast checks (a benchmark has no caller to
// return a Status to) and a CUDA-event timer that flushes the L2 before every timed run.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <utility>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/stream.h"
#include "base/status.h"

namespace peregrine::bench {

inline void Must(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}
inline void MustCuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}
inline void MustBlas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(s));
  std::exit(1);
}
template <typename T>
T MustValue(Result<T> r, const char* what) {
  Must(r.status(), what);
  return std::move(r).value();
}

// Bytes written between timed runs: several times the H200's 60 MB of L2.
inline constexpr size_t kFlushBytes = size_t{256} << 20;

struct GpuTimer {
  cuda::Event start, end;
  cuda::DeviceBuffer flush;  // >= kFlushBytes
  cudaStream_t stream = nullptr;
  int warmup = 3;
  int runs = 25;

  // Median milliseconds of `run` over `runs` timed runs after `warmup` untimed ones, with
  // the L2 flushed before each timed run.
  double Median(const std::function<void()>& run) {
    for (int i = 0; i < warmup; ++i) run();
    std::vector<double> ms;
    for (int i = 0; i < runs; ++i) {
      MustCuda(cudaMemsetAsync(flush.data(), i & 0xff, kFlushBytes, stream), "flush L2");
      Must(start.Record(stream), "record");
      run();
      Must(end.Record(stream), "record");
      Must(end.Synchronize(), "sync");
      ms.push_back(MustValue(cuda::Event::ElapsedMs(start, end), "elapsed"));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

}  // namespace peregrine::bench
