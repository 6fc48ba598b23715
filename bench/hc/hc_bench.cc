// mHC kernels at DeepSeek-V4-Flash shapes (hc 4, D 4096): the sub-layer collapse (pre), its
// mixes GEMM alone, the expansion (post), the head collapse, plus embedding and clamped SwiGLU
// at larger N. Each op is timed with CUDA events around one call after an L2 flush (what a
// decode step sees: the weights and streams were pushed out by the layer in between); median
// of kReps after kWarmup. The pre is also timed inside a CUDA graph of kGraphCalls back-to-back
// calls (warm L2, no launch gaps): the figure the 5 us per sub-layer target is about.
// Peer: cuBLAS SGEMM (fp32, no TF32) for the mixes GEMM on the same inputs. The first rows
// time a launch of one CTA that does nothing useful: the floor every kernel pays here.
// Prints time, bytes counted from the shapes, TB/s and the fraction of the 4.3 TB/s copy
// roofline; appends JSON lines to --out FILE when given.
//
//   peregrine_hc_bench [--out FILE]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/embedding.cuh"
#include "kernels/hyper_connection.cuh"
#include "kernels/swiglu.cuh"

namespace {

constexpr int kWarmup = 10;
constexpr int kReps = 50;
constexpr int kGraphCalls = 20;
constexpr double kRooflineTBps = 4.3;
constexpr int64_t kHc = 4;
constexpr int64_t kDim = 4096;
constexpr int64_t kMixes = (2 + kHc) * kHc;
constexpr int64_t kK = kHc * kDim;
constexpr size_t kFlushBytes = size_t{256} << 20;  // > 60 MB of L2, several times over

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void Check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: cuBLAS status %d\n", what, static_cast<int>(s));
    std::exit(1);
  }
}

template <typename T>
T* DeviceRandom(size_t count, float stddev, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<T> host(count);
  for (T& v : host) {
    const float f = dist(rng);
    if constexpr (sizeof(T) == 2) {
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      v = static_cast<T>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    } else {
      v = f;
    }
  }
  T* d = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&d), count * sizeof(T)), "cudaMalloc");
  Check(cudaMemcpy(d, host.data(), count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  return d;
}

struct Timer {
  cudaStream_t stream;
  cudaEvent_t start, stop;
  void* flush;
  // Median microseconds of one `op` after an L2 flush.
  double Cold(const std::function<void()>& op) {
    std::vector<float> ms;
    for (int i = 0; i < kWarmup + kReps; ++i) {
      Check(cudaMemsetAsync(flush, i & 0xff, kFlushBytes, stream), "flush");
      Check(cudaEventRecord(start, stream), "record");
      op();
      Check(cudaEventRecord(stop, stream), "record");
      Check(cudaEventSynchronize(stop), "sync");
      float t = 0.0f;
      Check(cudaEventElapsedTime(&t, start, stop), "elapsed");
      if (i >= kWarmup) ms.push_back(t);
    }
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return 1e3 * ms[ms.size() / 2];
  }
  // Median microseconds per call of kGraphCalls calls of `op` captured in one graph.
  double InGraph(const std::function<void()>& op) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    Check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
    for (int i = 0; i < kGraphCalls; ++i) op();
    Check(cudaStreamEndCapture(stream, &graph), "end capture");
    Check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    std::vector<float> ms;
    for (int i = 0; i < kWarmup + kReps; ++i) {
      Check(cudaEventRecord(start, stream), "record");
      Check(cudaGraphLaunch(exec, stream), "launch");
      Check(cudaEventRecord(stop, stream), "record");
      Check(cudaEventSynchronize(stop), "sync");
      float t = 0.0f;
      Check(cudaEventElapsedTime(&t, start, stop), "elapsed");
      if (i >= kWarmup) ms.push_back(t);
    }
    Check(cudaGraphExecDestroy(exec), "destroy");
    Check(cudaGraphDestroy(graph), "destroy");
    std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
    return 1e3 * ms[ms.size() / 2] / kGraphCalls;
  }
};

struct Row {
  std::string op;
  int64_t n;
  double us;
  double bytes;
  double flops;
  double peer_us;  // 0: no peer
};

void Report(const Row& r, std::ofstream* out) {
  const double tbps = r.bytes / (r.us * 1e-6) / 1e12;
  std::printf("%-18s N=%-5lld %9.2f us %10.3f MB %7.3f TB/s %5.1f%% of roofline %8.3f TFLOP/s", r.op.c_str(),
              static_cast<long long>(r.n), r.us, r.bytes / 1e6, tbps, 100.0 * tbps / kRooflineTBps,
              r.flops / (r.us * 1e-6) / 1e12);
  if (r.peer_us > 0) std::printf("   cuBLAS %8.2f us, ours/cuBLAS %.2f", r.peer_us, r.us / r.peer_us);
  std::printf("\n");
  if (out != nullptr) {
    *out << "{\"bench\":\"hc\",\"op\":\"" << r.op << "\",\"n\":" << r.n << ",\"hc\":" << kHc << ",\"d\":" << kDim
         << ",\"us\":" << r.us << ",\"bytes\":" << r.bytes << ",\"flops\":" << r.flops
         << ",\"tbps\":" << r.bytes / (r.us * 1e-6) / 1e12
         << ",\"roofline_fraction\":" << r.bytes / (r.us * 1e-6) / 1e12 / kRooflineTBps;
    if (r.peer_us > 0) *out << ",\"cublas_us\":" << r.peer_us << ",\"ratio_to_cublas\":" << r.us / r.peer_us;
    *out << "}\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::ofstream out_file;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_file.open(argv[++i], std::ios::app);
    } else {
      std::fprintf(stderr, "usage: %s [--out FILE]\n", argv[0]);
      return 2;
    }
  }
  std::ofstream* out = out_file.is_open() ? &out_file : nullptr;
  using namespace peregrine::kernels;

  constexpr int64_t kMaxN = 4096;
  Timer timer{};
  Check(cudaStreamCreateWithFlags(&timer.stream, cudaStreamNonBlocking), "stream");
  Check(cudaEventCreate(&timer.start), "event");
  Check(cudaEventCreate(&timer.stop), "event");
  Check(cudaMalloc(&timer.flush, kFlushBytes), "flush buffer");
  cublasHandle_t blas;
  Check(cublasCreate(&blas), "cublasCreate");
  Check(cublasSetStream(blas, timer.stream), "cublasSetStream");

  float* streams = DeviceRandom<float>(static_cast<size_t>(kMaxN * kK), 1.0f, 1);
  float* fn = DeviceRandom<float>(static_cast<size_t>(kMixes * kK), 0.015f, 2);
  float* base = DeviceRandom<float>(kMixes, 0.5f, 3);
  float* scale = DeviceRandom<float>(3, 1.0f, 4);
  float* norm = DeviceRandom<float>(kDim, 1.0f, 5);
  float* head_fn = DeviceRandom<float>(static_cast<size_t>(kHc * kK), 0.015f, 6);
  uint16_t* x = DeviceRandom<uint16_t>(static_cast<size_t>(kMaxN * kDim), 1.0f, 7);
  float* post = DeviceRandom<float>(static_cast<size_t>(kMaxN * kHc), 1.0f, 8);
  float* comb = DeviceRandom<float>(static_cast<size_t>(kMaxN * kHc * kHc), 0.3f, 9);
  float* gemm_out = DeviceRandom<float>(static_cast<size_t>(kMaxN * kMixes), 1.0f, 10);
  float* workspace = nullptr;
  const size_t workspace_bytes = static_cast<size_t>(HcWorkspaceFloats(kMaxN, kMixes, kK)) * 4;
  Check(cudaMalloc(reinterpret_cast<void**>(&workspace), workspace_bytes), "workspace");
  constexpr int64_t kVocab = 129280, kInter = 2048;
  uint16_t* table = DeviceRandom<uint16_t>(static_cast<size_t>(kVocab * kDim), 1.0f, 11);
  uint16_t* gate_up = DeviceRandom<uint16_t>(static_cast<size_t>(kMaxN * 2 * kInter), 4.0f, 12);
  uint16_t* h = DeviceRandom<uint16_t>(static_cast<size_t>(kMaxN * kInter), 1.0f, 13);
  std::vector<int32_t> ids_host(kMaxN);
  for (int64_t i = 0; i < kMaxN; ++i) ids_host[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % kVocab);
  int32_t* ids = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&ids), kMaxN * 4), "ids");
  Check(cudaMemcpy(ids, ids_host.data(), kMaxN * 4, cudaMemcpyHostToDevice), "ids");

  {
    // The per-kernel floor on this machine: one CTA of 8 columns (a launch with no work).
    HcExpandParams tiny{streams, x, post, comb, 1, 1, 8};
    auto op = [&] { Check(LaunchHcExpand(tiny, timer.stream), "tiny"); };
    Report({"floor_one_cta", 1, timer.Cold(op), 0.0, 0.0, 0.0}, out);
    Report({"floor_one_cta_in_graph", 1, timer.InGraph(op), 0.0, 0.0, 0.0}, out);
  }
  std::printf("mHC at V4-Flash shapes: hc %lld, D %lld, M %lld, fn %.2f MB\n", static_cast<long long>(kHc),
              static_cast<long long>(kDim), static_cast<long long>(kMixes), kMixes * kK * 4 / 1e6);
  for (int64_t n : {1, 16, 64, 128}) {
    HcCollapseParams pre{};
    pre.streams = streams;
    pre.rows = nullptr;
    pre.fn = fn;
    pre.base = base;
    pre.scale = scale;
    pre.norm_weight = norm;
    pre.workspace = workspace;
    pre.x = x;
    pre.post = post;
    pre.comb = comb;
    pre.num_tokens = n;
    pre.num_stream_rows = n;
    pre.hc = kHc;
    pre.dim = kDim;
    pre.has_comb = true;
    HcCollapseParams head = pre;
    head.fn = head_fn;
    head.has_comb = false;
    head.post = nullptr;
    head.comb = nullptr;
    HcExpandParams expand{streams, x, post, comb, n, kHc, kDim};

    const double nd = static_cast<double>(n);
    const double stream_bytes = nd * kK * 4;
    const double mix_bytes = kMixes * kK * 4.0 + stream_bytes;
    const double mix_flops = 2.0 * nd * kMixes * kK;
    const double pre_bytes = mix_bytes + nd * kDim * 2 + nd * (kHc + kHc * kHc) * 4 + kDim * 4;
    const float alpha = 1.0f, beta = 0.0f;
    auto sgemm = [&] {
      // Row-major C[N, M] = streams[N, K] . fn[M, K]^T, i.e. column-major C^T = fn^T-op . streams.
      Check(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(kMixes), static_cast<int>(n),
                        static_cast<int>(kK), &alpha, fn, static_cast<int>(kK), streams, static_cast<int>(kK), &beta,
                        gemm_out, static_cast<int>(kMixes)),
            "sgemm");
    };
    const double cublas_us = timer.Cold(sgemm);
    Report({"mixes_gemm", n, timer.Cold([&] { Check(LaunchHcMixes(pre, timer.stream), "mixes"); }), mix_bytes,
            mix_flops, cublas_us},
           out);
    Report({"pre", n, timer.Cold([&] { Check(LaunchHcCollapse(pre, timer.stream), "pre"); }), pre_bytes, mix_flops,
            0.0},
           out);
    Report({"pre_in_graph", n, timer.InGraph([&] { Check(LaunchHcCollapse(pre, timer.stream), "pre"); }), pre_bytes,
            mix_flops, 0.0},
           out);
    Report({"post", n, timer.Cold([&] { Check(LaunchHcExpand(expand, timer.stream), "post"); }),
            2 * stream_bytes + nd * kDim * 2 + nd * (kHc + kHc * kHc) * 4, 2.0 * nd * kK * (kHc + 1), 0.0},
           out);
    Report({"head", n, timer.Cold([&] { Check(LaunchHcCollapse(head, timer.stream), "head"); }),
            kHc * kK * 4.0 + stream_bytes + nd * kDim * 2, 2.0 * nd * kHc * kK, 0.0},
           out);
  }
  for (int64_t n : {int64_t{128}, kMaxN}) {
    EmbeddingParams e{ids, table, streams, n, kVocab, static_cast<int>(kHc), static_cast<int>(kDim)};
    const double nd = static_cast<double>(n);
    Report({"embedding", n, timer.Cold([&] { Check(LaunchEmbedding(e, timer.stream), "embedding"); }),
            nd * kDim * 2 + nd * kK * 4, 0.0, 0.0},
           out);
    SwigluParams s{gate_up, h, n, kInter, 10.0f};
    Report({"swiglu_i2048", n, timer.Cold([&] { Check(LaunchSwiglu(s, timer.stream), "swiglu"); }),
            nd * kInter * 6, 0.0, 0.0},
           out);
  }
  for (int64_t n : {int64_t{1024}, kMaxN}) {
    HcExpandParams expand{streams, x, post, comb, n, kHc, kDim};
    const double nd = static_cast<double>(n);
    Report({"post", n, timer.Cold([&] { Check(LaunchHcExpand(expand, timer.stream), "post"); }),
            2 * nd * kK * 4 + nd * kDim * 2 + nd * (kHc + kHc * kHc) * 4, 2.0 * nd * kK * (kHc + 1), 0.0},
           out);
  }
  Check(cudaStreamSynchronize(timer.stream), "final sync");
  cublasDestroy(blas);
  return 0;
}
