// peregrine_fp8_bench: the block-scaled FP8 projections at V4-Flash dense shapes, with the
// bf16 cuBLAS projection (cuda::Linear) on the same shapes in the same process as the peer:
//  * "fp8_linear": Fp8Linear (activation quantisation + cuBLASLt VEC128 x BLK128x128 GEMM),
//    decode batches (judged in TB/s over the weight bytes) and a 4096-token prefill (TFLOP/s);
//  * "fp8_w8a16": the W8A16 decode kernel (Fp8W8A16Linear) at N <= 128, judged in TB/s over
//    the weight bytes against the H200's 4.8 TB/s HBM roofline, with its time ratio to
//    Fp8Linear and to the bf16 projection;
//  * "bf16_linear_invariant": the batch-invariant bf16 projection (kernels/bf16_linear.cuh,
//    --enable-deterministic-inference) at every batch, in TB/s over its bf16 weight bytes
//    (TFLOP/s for the prefill), with its time ratio to the bf16 cuBLAS projection;
//  * "bf16_gemv": the decode-sized bf16 projection (kernels/bf16_gemv.cuh, the default path at
//    N <= 4) in TB/s over its bf16 weight bytes, with its time ratio to the bf16 cuBLAS GEMM.
// Median of 25 CUDA-event-timed runs after 3 warm-ups, L2 flushed before each run (each run
// is one call: the small shapes are launch-bound). Prints and appends JSON lines.
//
//   peregrine_fp8_bench [--out FILE.jsonl]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/ops/fp8_linear.h"
#include "backend/cuda/ops/fp8_w8a16.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/stream.h"
#include "bench/common/gpu_bench.h"
#include "kernels/bf16_gemv.cuh"

namespace peregrine {
namespace {

constexpr double kCopyTBs = 4.3;          // measured device-to-device copy
constexpr double kHbmRooflineTBs = 4.8;   // H200 HBM3e datasheet
constexpr double kFp8DatasheetTFs = 1979; // H200 dense fp8
constexpr double kBf16MeasuredTFs = 790;  // measured 8192^3 bf16 matmul

struct Projection {
  const char* name;
  int64_t m, k;  // out, in
};
// V4-Flash (dim 4096, 64 heads x 512, q rank 1024, kv 512, shared expert 2048 wide).
constexpr Projection kShapes[] = {
    {"wq_a", 1024, 4096},      {"wq_b", 32768, 1024},       {"wkv", 512, 4096},
    {"wo_b", 4096, 8192},      {"shared_w13", 4096, 4096},  {"shared_w1", 2048, 4096},
    {"shared_w2", 4096, 2048}, {"index_wq_b", 8192, 1024},
};
constexpr int64_t kBatches[] = {1, 2, 4, 8, 16, 32, 64, 128, 4096};
constexpr int64_t kMaxW8A16Batch = 128;

using bench::GpuTimer;
using bench::kFlushBytes;
using bench::Must;
using bench::MustCuda;
using bench::MustValue;

int Main(int argc, char** argv) {
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--out" && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--out FILE.jsonl]\n", argv[0]);
      return 2;
    }
  }
  FILE* out = out_path.empty() ? nullptr : std::fopen(out_path.c_str(), "a");
  if (!out_path.empty() && out == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", out_path.c_str());
    return 1;
  }

  cuda::CudaRawAllocator raw;
  cuda::CachingAllocator allocator(raw);
  cuda::Stream stream = MustValue(cuda::Stream::Create(), "stream");
  cuda::Blas blas = MustValue(cuda::Blas::Create(allocator), "cublas");
  cuda::Blas invariant = MustValue(cuda::Blas::Create(allocator), "cublas");
  invariant.set_batch_invariant(true);
  auto alloc = [&](size_t bytes, int fill) {
    cuda::DeviceBuffer b = MustValue(allocator.Allocate(bytes), "allocate");
    MustCuda(cudaMemsetAsync(b.data(), fill, bytes, stream.get()), "fill");
    return b;
  };
  auto view = [](const cuda::DeviceBuffer& b, DType dtype, Shape shape) {
    return Tensor::Contiguous(b.data(), dtype, shape, Device::kCuda);
  };
  GpuTimer timer{MustValue(cuda::Event::Create(true), "event"), MustValue(cuda::Event::Create(true), "event"),
                 alloc(kFlushBytes, 0), stream.get()};

  for (const Projection& s : kShapes) {
    // Values do not change the timing; the fills give finite numbers: e4m3 0x38 = 1.0,
    // bf16 0x3c3c ~ 0.0115, f32 scales 0x3c3c3c3c ~ 0.0115.
    cuda::DeviceBuffer w = alloc(static_cast<size_t>(s.m * s.k), 0x38);
    cuda::DeviceBuffer w_scale = alloc(static_cast<size_t>(s.m / 128 * (s.k / 128)) * 4, 0x3c);
    cuda::DeviceBuffer w_bf16 = alloc(static_cast<size_t>(s.m * s.k) * 2, 0x3c);
    for (int64_t n : kBatches) {
      cuda::DeviceBuffer x = alloc(static_cast<size_t>(n * s.k) * 2, 0x3c);
      cuda::DeviceBuffer y = alloc(static_cast<size_t>(n * s.m) * 2, 0);
      const size_t workspace_bytes = cuda::Fp8LinearWorkspaceBytes(n, s.k, s.m);
      cuda::DeviceBuffer workspace = alloc(workspace_bytes, 0);
      cuda::Fp8LinearArgs args;
      args.x = view(x, DType::kBF16, {n, s.k});
      args.w = view(w, DType::kF8E4M3, {s.m, s.k});
      args.w_scale = view(w_scale, DType::kF32, {s.m / 128, s.k / 128});
      args.y = view(y, DType::kBF16, {n, s.m});
      args.workspace = view(workspace, DType::kU8, {static_cast<int64_t>(workspace_bytes)});
      const cuda::LinearArgs peer_args{view(x, DType::kBF16, {n, s.k}), view(w_bf16, DType::kBF16, {s.m, s.k}),
                                       view(y, DType::kBF16, {n, s.m})};

      const double fp8_ms = timer.Median([&] { Must(cuda::Fp8Linear(blas, args, stream.get()), "fp8_linear"); });
      const double peer_ms = timer.Median([&] { Must(cuda::CublasLinear(blas, peer_args, stream.get()), "linear"); });
      const double inv_ms =
          timer.Median([&] { Must(cuda::Linear(invariant, peer_args, stream.get()), "batch-invariant linear"); });
      const cuda::Fp8W8A16Args w8a16_args{args.x, args.w, args.w_scale, args.y};
      const double w8a16_ms =
          n <= kMaxW8A16Batch
              ? timer.Median([&] { Must(cuda::Fp8W8A16Linear(w8a16_args, stream.get()), "fp8_w8a16"); })
              : 0.0;
      // Counted from the shapes: the weight (+ its scales) is what decode must stream; the
      // activations add x read, x_q + scales written and read again, y written.
      const double weight_bytes = static_cast<double>(s.m * s.k) + static_cast<double>(s.m / 128 * (s.k / 128)) * 4;
      const double act_bytes = static_cast<double>(n * s.k) * (2 + 2) + static_cast<double>(n * (s.k / 128)) * 8 +
                               static_cast<double>(n * s.m) * 2;
      const double flops = 2.0 * static_cast<double>(n) * static_cast<double>(s.m) * static_cast<double>(s.k);
      const double us = fp8_ms * 1e3, peer_us = peer_ms * 1e3;
      const double tbs = weight_bytes / (us * 1e-6) / 1e12;
      const double tflops = flops / (us * 1e-6) / 1e12;
      const bool prefill = n >= 1024;
      char line[768];
      std::snprintf(line, sizeof(line),
                    "{\"op\":\"fp8_linear\",\"shape\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"regime\":\"%s\","
                    "\"weight_bytes\":%.0f,\"total_bytes\":%.0f,\"flops\":%.0f,\"time_us\":%.2f,"
                    "\"tb_s_weights\":%.3f,\"tflop_s\":%.2f,\"frac_copy_4.3tbs\":%.3f,\"frac_fp8_datasheet\":%.3f,"
                    "\"frac_bf16_measured\":%.3f,\"peer\":\"cublas_bf16_linear\",\"peer_time_us\":%.2f,"
                    "\"speedup_vs_peer\":%.2f}",
                    s.name, static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(n),
                    prefill ? "prefill" : "decode", weight_bytes, weight_bytes + act_bytes, flops, us, tbs, tflops,
                    tbs / kCopyTBs, tflops / kFp8DatasheetTFs, tflops / kBf16MeasuredTFs, peer_us, peer_us / us);
      std::printf("%s\n", line);
      if (out != nullptr) std::fprintf(out, "%s\n", line);
      {
        const double inv_us = inv_ms * 1e3, bf16_bytes = 2.0 * static_cast<double>(s.m * s.k);
        std::snprintf(line, sizeof(line),
                      "{\"op\":\"bf16_linear_invariant\",\"shape\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,"
                      "\"regime\":\"%s\",\"weight_bytes\":%.0f,\"time_us\":%.2f,\"tb_s_weights\":%.3f,"
                      "\"frac_roofline_4.8tbs\":%.3f,\"tflop_s\":%.2f,\"frac_bf16_measured\":%.3f,"
                      "\"peer\":\"cublas_bf16_linear\",\"peer_time_us\":%.2f,\"speedup_vs_peer\":%.2f}",
                      s.name, static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(n),
                      prefill ? "prefill" : "decode", bf16_bytes, inv_us, bf16_bytes / (inv_us * 1e-6) / 1e12,
                      bf16_bytes / (inv_us * 1e-6) / 1e12 / kHbmRooflineTBs, flops / (inv_us * 1e-6) / 1e12,
                      flops / (inv_us * 1e-6) / 1e12 / kBf16MeasuredTFs, peer_us, peer_us / inv_us);
        std::printf("%s\n", line);
        if (out != nullptr) std::fprintf(out, "%s\n", line);
      }
      if (n <= kernels::kBf16GemvMaxTokens) {
        cuda::StridedLinearArgs g;
        g.x = x.data();
        g.x_stride = s.k;
        g.w = w_bf16.data();
        g.y = y.data();
        g.y_stride = s.m;
        g.n = n;
        g.m = s.m;
        g.k = s.k;
        const double gemv_us =
            timer.Median([&] { Must(cuda::DecodeLinear(blas, g, stream.get()), "decode linear"); }) * 1e3;
        const double bf16_bytes = 2.0 * static_cast<double>(s.m * s.k);
        std::snprintf(line, sizeof(line),
                      "{\"op\":\"bf16_gemv\",\"shape\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"regime\":\"decode\","
                      "\"weight_bytes\":%.0f,\"time_us\":%.2f,\"tb_s_weights\":%.3f,\"frac_roofline_4.8tbs\":%.3f,"
                      "\"peer\":\"cublas_bf16_linear\",\"peer_time_us\":%.2f,\"peer_tb_s\":%.3f,\"speedup_vs_peer\":%.2f}",
                      s.name, static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(n),
                      bf16_bytes, gemv_us, bf16_bytes / (gemv_us * 1e-6) / 1e12,
                      bf16_bytes / (gemv_us * 1e-6) / 1e12 / kHbmRooflineTBs, peer_us,
                      bf16_bytes / (peer_us * 1e-6) / 1e12, peer_us / gemv_us);
        std::printf("%s\n", line);
        if (out != nullptr) std::fprintf(out, "%s\n", line);
      }
      if (n > kMaxW8A16Batch) continue;
      const double w_us = w8a16_ms * 1e3;
      const double w_tbs = weight_bytes / (w_us * 1e-6) / 1e12;
      std::snprintf(line, sizeof(line),
                    "{\"op\":\"fp8_w8a16\",\"shape\":\"%s\",\"m\":%lld,\"k\":%lld,\"n\":%lld,\"regime\":\"decode\","
                    "\"weight_bytes\":%.0f,\"time_us\":%.2f,\"tb_s_weights\":%.3f,\"frac_roofline_4.8tbs\":%.3f,"
                    "\"fp8_linear_time_us\":%.2f,\"speedup_vs_fp8_linear\":%.2f,\"bf16_linear_time_us\":%.2f,"
                    "\"speedup_vs_bf16_linear\":%.2f}",
                    s.name, static_cast<long long>(s.m), static_cast<long long>(s.k), static_cast<long long>(n),
                    weight_bytes, w_us, w_tbs, w_tbs / kHbmRooflineTBs, us, us / w_us, peer_us, peer_us / w_us);
      std::printf("%s\n", line);
      if (out != nullptr) std::fprintf(out, "%s\n", line);
    }
  }
  if (out != nullptr) std::fclose(out);
  return 0;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) { return peregrine::Main(argc, argv); }
