// peregrine_moe_bench: the routed experts' gate-up and down GEMMs at V4-Flash decode shapes
// (E=256, K=6, D=4096, I=2048), bf16 and MXFP4 weights, batch 1/16/64/128 with uniform random
// top-6 routing. Times each op and the pair with CUDA events (median of 25 runs after warm-up,
// L2 flushed before every run) and a peer in the same process: one cublasGemmEx per touched
// expert and matrix, looped on the host (bf16 weights for both dtypes: the peer's MXFP4 path
// would add a dequantisation pass on top). MXFP4 also runs the CUDA-core kernel forced (dtype
// "mxfp4_cuda_core"), the launcher's own choice being "mxfp4". Prints and writes JSON lines.
//
//   peregrine_moe_bench [--out FILE.jsonl] [--batch N ...] [--format bf16|mxfp4]
//                       [--mxfp4-kernel auto|cuda_core] [--bandwidth TB/s]
//
// --batch (repeatable), --format and --mxfp4-kernel (repeatable) narrow the sweep, e.g. to one
// kernel for a profiler; --bandwidth is the roofline in the JSON's roofline_fraction (default
// 4.3: an H200).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/ops/moe.h"
#include "backend/cuda/stream.h"
#include "bench/common/gpu_bench.h"

namespace peregrine {
namespace {

using cuda::MoeMxfp4Kernel;
using cuda::MoeWeightFormat;

constexpr int64_t kExperts = 256, kTopK = 6, kDim = 4096, kInter = 2048, kMaxBatch = 128;
constexpr double kDefaultRooflineTBs = 4.3;

using bench::GpuTimer;
using bench::kFlushBytes;
using bench::Must;
using bench::MustBlas;
using bench::MustCuda;
using bench::MustValue;

struct Row {
  std::string op, dtype;
  int64_t batch = 0, touched = 0;
  double bytes = 0, flops = 0, us = 0, peer_us = 0;
};

void Emit(const Row& r, double roofline_tbs, FILE* out) {
  const double tbs = r.bytes / (r.us * 1e-6) / 1e12;
  const double tflops = r.flops / (r.us * 1e-6) / 1e12;
  char line[512];
  std::snprintf(line, sizeof(line),
                "{\"op\":\"%s\",\"dtype\":\"%s\",\"batch\":%lld,\"experts_touched\":%lld,\"bytes\":%.0f,"
                "\"flops\":%.0f,\"time_us\":%.2f,\"tb_s\":%.3f,\"tflop_s\":%.3f,\"roofline_fraction\":%.3f,"
                "\"peer\":\"cublas_loop_bf16\",\"peer_time_us\":%.2f,\"speedup_vs_peer\":%.2f}",
                r.op.c_str(), r.dtype.c_str(), static_cast<long long>(r.batch), static_cast<long long>(r.touched),
                r.bytes, r.flops, r.us, tbs, tflops, tbs / roofline_tbs, r.peer_us, r.peer_us / r.us);
  std::printf("%s\n", line);
  if (out != nullptr) std::fprintf(out, "%s\n", line);
}

int Main(int argc, char** argv) {
  std::string out_path;
  std::vector<int64_t> batches;
  std::vector<MoeWeightFormat> formats;
  std::vector<MoeMxfp4Kernel> mxfp4_kernels;
  double roofline_tbs = kDefaultRooflineTBs;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--out" && has_value) {
      out_path = argv[++i];
    } else if (arg == "--batch" && has_value) {
      const long long b = std::atoll(argv[++i]);
      if (b < 1 || b > kMaxBatch) {
        std::fprintf(stderr, "--batch must be in [1, %lld]\n", static_cast<long long>(kMaxBatch));
        return 2;
      }
      batches.push_back(b);
    } else if (arg == "--format" && has_value) {
      const std::string f = argv[++i];
      if (f != "bf16" && f != "mxfp4") {
        std::fprintf(stderr, "--format is bf16 or mxfp4\n");
        return 2;
      }
      formats.push_back(f == "bf16" ? MoeWeightFormat::kBF16 : MoeWeightFormat::kMxfp4);
    } else if (arg == "--mxfp4-kernel" && has_value) {
      const std::string kernel = argv[++i];
      if (kernel == "auto") {
        mxfp4_kernels.push_back(MoeMxfp4Kernel::kAuto);
      } else if (kernel == "cuda_core") {
        mxfp4_kernels.push_back(MoeMxfp4Kernel::kCudaCore);
      } else {
        std::fprintf(stderr, "--mxfp4-kernel is auto or cuda_core\n");
        return 1;
      }
    } else if (arg == "--bandwidth" && has_value) {
      roofline_tbs = std::atof(argv[++i]);
      if (!(roofline_tbs > 0.0)) {
        std::fprintf(stderr, "--bandwidth must be positive\n");
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--out FILE.jsonl] [--batch N ...] [--format bf16|mxfp4] "
                   "[--mxfp4-kernel auto|cuda_core] [--bandwidth TB/s]\n",
                   argv[0]);
      return 2;
    }
  }
  if (batches.empty()) batches = {1, 16, 64, 128};
  if (formats.empty()) formats = {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4};
  if (mxfp4_kernels.empty())
    mxfp4_kernels = {MoeMxfp4Kernel::kAuto, MoeMxfp4Kernel::kCudaCore};
  FILE* out = out_path.empty() ? nullptr : std::fopen(out_path.c_str(), "a");
  if (!out_path.empty() && out == nullptr) {
    std::fprintf(stderr, "cannot open %s\n", out_path.c_str());
    return 1;
  }

  cuda::CudaRawAllocator raw;
  cuda::CachingAllocator allocator(raw);
  cuda::Stream stream = MustValue(cuda::Stream::Create(), "stream");
  cuda::Blas blas = MustValue(cuda::Blas::Create(allocator), "cublas");
  cublasHandle_t handle = MustValue(blas.On(stream.get()), "cublas stream");
  auto alloc = [&](size_t bytes, int fill) {
    cuda::DeviceBuffer b = MustValue(allocator.Allocate(bytes), "allocate");
    MustCuda(cudaMemsetAsync(b.data(), fill, bytes, stream.get()), "fill");
    return b;
  };
  // Weight values do not change the timing; fills give finite bf16 (0x3b3b ~ 0.0029), e2m1
  // and 2^-4 scales.
  const size_t matrix = static_cast<size_t>(kExperts * kInter * kDim);
  cuda::DeviceBuffer w1 = alloc(matrix * 2, 0x3b), w3 = alloc(matrix * 2, 0x3b), w2 = alloc(matrix * 2, 0x3b);
  cuda::DeviceBuffer q1 = alloc(matrix / 2, 0x5a), q3 = alloc(matrix / 2, 0x5a), q2 = alloc(matrix / 2, 0x5a);
  cuda::DeviceBuffer s1 = alloc(matrix / 32, 0x7b), s3 = alloc(matrix / 32, 0x7b), s2 = alloc(matrix / 32, 0x7b);
  const int64_t max_batch = kMaxBatch, max_nk = max_batch * kTopK;
  cuda::DeviceBuffer x = alloc(static_cast<size_t>(max_batch * kDim) * 2, 0x3c);
  cuda::DeviceBuffer h = alloc(static_cast<size_t>(max_nk * kInter) * 2, 0);
  cuda::DeviceBuffer y = alloc(static_cast<size_t>(max_nk * kDim) * 4, 0);
  cuda::DeviceBuffer peer_out = alloc(static_cast<size_t>(max_nk * kInter) * 4, 0);
  cuda::DeviceBuffer ids = alloc(static_cast<size_t>(max_nk) * 4, 0);
  cuda::DeviceBuffer offsets = alloc(static_cast<size_t>(kExperts + 1) * 4, 0);
  cuda::DeviceBuffer sorted = alloc(static_cast<size_t>(max_nk) * 4, 0);
  GpuTimer timer{MustValue(cuda::Event::Create(true), "event"), MustValue(cuda::Event::Create(true), "event"),
                 alloc(kFlushBytes, 0), stream.get()};
  auto view = [](const cuda::DeviceBuffer& b, DType dtype, Shape shape) {
    return Tensor::Contiguous(b.data(), dtype, shape, Device::kCuda);
  };

  std::mt19937 rng(42);
  for (int64_t batch : batches) {
    const int64_t nk = batch * kTopK;
    std::vector<int32_t> topk(static_cast<size_t>(nk));
    std::vector<int64_t> per_expert(kExperts, 0);
    std::vector<int32_t> perm(kExperts);
    for (int64_t t = 0; t < batch; ++t) {
      for (int e = 0; e < kExperts; ++e) perm[static_cast<size_t>(e)] = e;
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int64_t k = 0; k < kTopK; ++k) {
        topk[static_cast<size_t>(t * kTopK + k)] = perm[static_cast<size_t>(k)];
        ++per_expert[static_cast<size_t>(perm[static_cast<size_t>(k)])];
      }
    }
    const int64_t touched = std::count_if(per_expert.begin(), per_expert.end(), [](int64_t c) { return c > 0; });
    MustCuda(cudaMemcpyAsync(ids.data(), topk.data(), topk.size() * 4, cudaMemcpyHostToDevice, stream.get()), "ids");
    cuda::MoeAlignArgs align;
    align.topk_ids = view(ids, DType::kI32, {batch, kTopK});
    align.expert_offsets = view(offsets, DType::kI32, {kExperts + 1});
    align.sorted_assignments = view(sorted, DType::kI32, {nk});
    Must(cuda::MoeAlign(align, stream.get()), "align");

    // The peer: per touched expert, C[n, out] = X[n, in] W[out, in]^T for each matrix.
    auto peer = [&](bool gate_up) {
      const float alpha = 1.0f, beta = 0.0f;
      for (int64_t e = 0; e < kExperts; ++e) {
        const int n = static_cast<int>(per_expert[static_cast<size_t>(e)]);
        if (n == 0) continue;
        const int64_t rows = gate_up ? kInter : kDim, cols = gate_up ? kDim : kInter;
        const size_t offset = static_cast<size_t>(e * rows * cols) * 2;
        for (const cuda::DeviceBuffer* w : gate_up ? std::vector<const cuda::DeviceBuffer*>{&w1, &w3}
                                                   : std::vector<const cuda::DeviceBuffer*>{&w2}) {
          MustBlas(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n, static_cast<int>(cols),
                                &alpha, static_cast<const char*>(w->data()) + offset, CUDA_R_16BF,
                                static_cast<int>(cols), gate_up ? x.data() : h.data(), CUDA_R_16BF,
                                static_cast<int>(cols), &beta, peer_out.data(), CUDA_R_16BF, static_cast<int>(rows),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
        }
      }
    };
    const double peer_gate_up = timer.Median([&] { peer(true); });
    const double peer_down = timer.Median([&] { peer(false); });

    struct Variant {
      MoeWeightFormat format;
      MoeMxfp4Kernel kernel;
      const char* dtype;
    };
    std::vector<Variant> variants;
    for (MoeWeightFormat format : formats) {
      if (format == MoeWeightFormat::kBF16) {
        variants.push_back({format, MoeMxfp4Kernel::kAuto, "bf16"});
        continue;
      }
      for (MoeMxfp4Kernel kernel : mxfp4_kernels)
        variants.push_back({format, kernel, kernel == MoeMxfp4Kernel::kAuto ? "mxfp4" : "mxfp4_cuda_core"});
    }
    for (const Variant& variant : variants) {
      const MoeWeightFormat format = variant.format;
      const bool fp4 = format == MoeWeightFormat::kMxfp4;
      auto matrix_view = [&](const cuda::DeviceBuffer& bf16, const cuda::DeviceBuffer& packed,
                             const cuda::DeviceBuffer& scale, int64_t rows, int64_t cols) {
        cuda::MoeExpertMatrix m;
        if (fp4) {
          m.weight = view(packed, DType::kU8, {kExperts, rows, cols / 2});
          m.scale = view(scale, DType::kU8, {kExperts, rows, cols / 32});
        } else {
          m.weight = view(bf16, DType::kBF16, {kExperts, rows, cols});
        }
        return m;
      };
      cuda::MoeGateUpArgs gate_up;
      gate_up.x = view(x, DType::kBF16, {batch, kDim});
      gate_up.sorted_assignments = align.sorted_assignments;
      gate_up.expert_offsets = align.expert_offsets;
      gate_up.format = format;
      gate_up.w1 = matrix_view(w1, q1, s1, kInter, kDim);
      gate_up.w3 = matrix_view(w3, q3, s3, kInter, kDim);
      gate_up.h = view(h, DType::kBF16, {nk, kInter});
      gate_up.swiglu_limit = 10.0f;
      gate_up.mxfp4_kernel = variant.kernel;
      cuda::MoeDownArgs down;
      down.h = gate_up.h;
      down.sorted_assignments = align.sorted_assignments;
      down.expert_offsets = align.expert_offsets;
      down.format = format;
      down.w2 = matrix_view(w2, q2, s2, kDim, kInter);
      down.y = view(y, DType::kF32, {nk, kDim});
      down.mxfp4_kernel = variant.kernel;

      // Bytes from the shapes: the touched experts' weights (+ scales) and the activations.
      const double per_weight = fp4 ? 0.5 + 1.0 / 32 : 2.0;
      const double expert_matrix = static_cast<double>(kInter * kDim) * per_weight;
      const double gu_bytes = touched * 2 * expert_matrix + batch * kDim * 2.0 + nk * kInter * 2.0;
      const double down_bytes = touched * expert_matrix + nk * kInter * 2.0 + nk * kDim * 4.0;
      const double gu_flops = 2.0 * 2 * nk * kInter * kDim, down_flops = 2.0 * nk * kDim * kInter;
      const char* dtype = variant.dtype;

      Row r{"gate_up", dtype, batch, touched, gu_bytes, gu_flops};
      r.us = 1e3 * timer.Median([&] { Must(cuda::MoeGateUp(gate_up, stream.get()), "gate_up"); });
      r.peer_us = 1e3 * peer_gate_up;
      Emit(r, roofline_tbs, out);
      Row d{"down", dtype, batch, touched, down_bytes, down_flops};
      d.us = 1e3 * timer.Median([&] { Must(cuda::MoeDown(down, stream.get()), "down"); });
      d.peer_us = 1e3 * peer_down;
      Emit(d, roofline_tbs, out);
      Row both{"gate_up+down", dtype, batch, touched, gu_bytes + down_bytes, gu_flops + down_flops};
      both.us = 1e3 * timer.Median([&] {
        Must(cuda::MoeGateUp(gate_up, stream.get()), "gate_up");
        Must(cuda::MoeDown(down, stream.get()), "down");
      });
      both.peer_us = 1e3 * (peer_gate_up + peer_down);
      Emit(both, roofline_tbs, out);
    }
  }
  if (out != nullptr) std::fclose(out);
  return 0;
}

}  // namespace
}  // namespace peregrine

int main(int argc, char** argv) { return peregrine::Main(argc, argv); }
