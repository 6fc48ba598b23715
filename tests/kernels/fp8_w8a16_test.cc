// The W8A16 dense FP8 projection (bf16 x, e4m3 weights with 128x128 block scales) against a
// CPU reference computed in double from the same e4m3 bytes and scales (model/dequant.h),
// over N = 1..100 and shapes with partial row tiles, partial scale blocks and K split over a
// cluster; bf16 and f32 outputs; batch invariance; the prefill dispatch (Fp8Projection); the
// load-time weight quantiser (bit for bit); one capture; launcher checks (run without a GPU).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend/cuda/blas.h"
#include "backend/cuda/ops/fp8_linear.h"
#include "backend/cuda/ops/fp8_projection.h"
#include "backend/cuda/ops/fp8_w8a16.h"
#include "backend/cuda/stream.h"
#include "gpu_test_util.h"
#include "launcher_check_util.h"
#include "model/dequant.h"

namespace peregrine::testing {
namespace {

constexpr int64_t kBlock = 128;
int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Random e4m3 codes (never NaN) and block scales: powers of two (what UE8M0 checkpoints
// give) or arbitrary positive f32 values (the kernel applies any f32 scale).
struct Fp8Weight {
  int64_t m = 0, k = 0;
  std::vector<uint8_t> codes;  // [M, K]
  std::vector<float> scales;   // [ceil(M/128), ceil(K/128)]
  std::vector<float> dequant;  // [M, K], exact for power-of-two scales
};

Fp8Weight MakeWeight(std::mt19937& rng, int64_t m, int64_t k, bool pow2_scales) {
  Fp8Weight w{m, k, {}, {}, {}};
  const std::vector<float> raw = RandomNormal(rng, static_cast<size_t>(m * k), 64.0f);
  w.codes.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) w.codes[i] = F32ToE4M3(raw[i]);
  // A few subnormal codes and zeros in every row band.
  for (size_t i = 0; i < w.codes.size(); i += 97) w.codes[i] = static_cast<uint8_t>((i / 97) % 8 | (i % 2 ? 0x80 : 0));
  w.scales.resize(static_cast<size_t>(CeilDiv(m, kBlock) * CeilDiv(k, kBlock)));
  std::uniform_int_distribution<int> exponent(-13, -7);
  std::uniform_real_distribution<float> mantissa(1.0f, 2.0f);
  for (float& s : w.scales) s = std::ldexp(pow2_scales ? 1.0f : mantissa(rng), exponent(rng));
  w.dequant.resize(raw.size());
  DequantFp8Blocks(w.codes.data(), m, k, reinterpret_cast<const uint8_t*>(w.scales.data()), DType::kF32,
                   w.dequant.data());
  return w;
}

// bf16 activations spanning a few decades per row, with outliers.
std::vector<float> MakeActivations(std::mt19937& rng, int64_t n, int64_t k) {
  std::vector<float> x = RandomNormal(rng, static_cast<size_t>(n * k));
  std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
  std::uniform_int_distribution<int64_t> column(0, k - 1);
  for (int64_t t = 0; t < n; ++t) {
    const float row_scale = std::pow(10.0f, decade(rng));
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(t * k + i)] *= row_scale;
    x[static_cast<size_t>(t * k + column(rng))] *= 30.0f;
  }
  return RoundedBF16(x);
}

struct Reference {
  std::vector<double> want;     // [N, M] exact sums of x * dequant(w)
  std::vector<double> abs_sum;  // [N, M] sums of |x * dequant(w)|
};

Reference Compute(const std::vector<float>& x, const Fp8Weight& w, int64_t n) {
  Reference r{std::vector<double>(static_cast<size_t>(n * w.m)), std::vector<double>(static_cast<size_t>(n * w.m))};
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < w.m; ++o) {
      const float* xr = x.data() + t * w.k;
      const float* wr = w.dequant.data() + o * w.k;
      double dot = 0, abs_dot = 0;
      for (int64_t i = 0; i < w.k; ++i) {
        const double p = static_cast<double>(xr[i]) * wr[i];
        dot += p;
        abs_dot += std::fabs(p);
      }
      r.want[static_cast<size_t>(t * w.m + o)] = dot;
      r.abs_sum[static_cast<size_t>(t * w.m + o)] = abs_dot;
    }
  return r;
}

// Tolerance against the exact sum: the products are exact (bf16 x times an e4m3 code widened
// exactly to bf16, in the MMA's fp32), so only fp32 accumulation differs. Allow one fp32 ulp
// of the running magnitude per addition, the tensor core's truncating adds included:
// (K + 64) * 2^-23 * sum|x w| (~2^-10 of sum|x w| at K = 8192). A bf16 y adds one rounding,
// 2^-8 |want|. A wrong scale, permutation or tile is off by O(sum|x w|).
::testing::AssertionResult WithinBound(const std::vector<float>& got, const Reference& ref, int64_t k, bool bf16_out,
                                       const std::string& what) {
  const double accumulation = static_cast<double>(k + 64) * std::ldexp(1.0, -23);
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << what << ": non-finite at " << i;
    const double bound = accumulation * ref.abs_sum[i] + (bf16_out ? std::ldexp(std::fabs(ref.want[i]), -8) : 0.0) +
                         1e-30;
    const double ratio = std::fabs(got[i] - ref.want[i]) / bound;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": element " << worst << " got " << got[worst] << " want "
                                       << ref.want[worst] << " (" << worst_ratio << "x the bound)";
}

class Fp8W8A16Test : public BlasGpuTest {
 protected:

  struct DeviceWeight {
    cuda::DeviceBuffer codes, scales;
  };
  DeviceWeight Put(const Fp8Weight& w) { return {Upload(w.codes), Upload(w.scales)}; }

  cuda::Fp8W8A16Args Args(const cuda::DeviceBuffer& x, const Fp8Weight& w, const DeviceWeight& d,
                          const cuda::DeviceBuffer& y, DType y_dtype, int64_t n) {
    return {View(x, DType::kBF16, {n, w.k}), View(d.codes, DType::kF8E4M3, {w.m, w.k}),
            View(d.scales, DType::kF32, {CeilDiv(w.m, kBlock), CeilDiv(w.k, kBlock)}), View(y, y_dtype, {n, w.m})};
  }

};

constexpr int64_t kBatches[] = {1, 2, 3, 7, 16, 33, 64, 100};

// (M, K, power-of-two scales): partial row tiles (M = 33, 200), partial scale blocks
// (K = 320, M = 200), a K split over 8 CTAs of a cluster (M = 130, K = 8192), V4-like shapes.
struct Shape2 {
  int64_t m, k;
  bool pow2;
};
constexpr Shape2 kShapes[] = {{16, 64, true},    {33, 320, true},    {200, 192, false}, {130, 8192, true},
                              {512, 4096, true}, {1024, 1024, false}, {4096, 512, true}};

TEST_F(Fp8W8A16Test, MatchesDequantisedReference) {
  std::mt19937 rng(7);
  for (const Shape2& s : kShapes) {
    const Fp8Weight w = MakeWeight(rng, s.m, s.k, s.pow2);
    const DeviceWeight dw = Put(w);
    const int64_t n_max = kBatches[std::size(kBatches) - 1];
    const std::vector<float> x_all = MakeActivations(rng, n_max, s.k);
    const Reference ref_all = Compute(x_all, w, n_max);
    cuda::DeviceBuffer x_d = Upload(ToBF16(x_all));
    std::vector<float> rows_at_max;  // y32 of N = n_max, for the batch-invariance check
    for (auto it = std::rbegin(kBatches); it != std::rend(kBatches); ++it) {
      const int64_t n = *it;
      SCOPED_TRACE("N=" + std::to_string(n) + " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
                   (s.pow2 ? " pow2 scales" : " f32 scales"));
      const size_t count = static_cast<size_t>(n * s.m);
      Reference ref{std::vector<double>(ref_all.want.begin(), ref_all.want.begin() + static_cast<int64_t>(count)),
                    std::vector<double>(ref_all.abs_sum.begin(), ref_all.abs_sum.begin() + static_cast<int64_t>(count))};
      cuda::DeviceBuffer y32 = Poisoned(count * 4), y16 = Poisoned(count * 2);
      PG_ASSERT_OK(cuda::Fp8W8A16Linear(Args(x_d, w, dw, y32, DType::kF32, n), stream_.get()));
      PG_ASSERT_OK(cuda::Fp8W8A16Linear(Args(x_d, w, dw, y16, DType::kBF16, n), stream_.get()));
      Sync();
      const std::vector<float> got32 = Download<float>(y32, count);
      const std::vector<float> got16 = DownloadBF16(y16, count);
      EXPECT_TRUE(WithinBound(got32, ref, s.k, false, "f32 y"));
      EXPECT_TRUE(WithinBound(got16, ref, s.k, true, "bf16 y"));
      // The bf16 output is the f32 one rounded once.
      for (size_t i = 0; i < count; ++i)
        ASSERT_EQ(got16[i], RoundBF16(got32[i])) << "bf16 y is not the rounded f32 y at " << i;
      // A token's output does not depend on the batch around it.
      if (rows_at_max.empty()) {
        rows_at_max = got32;
      } else {
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(got32[i]), std::bit_cast<uint32_t>(rows_at_max[i]))
              << "row " << i / static_cast<size_t>(s.m) << " differs from the same row in a batch of " << n_max;
      }
    }
  }
}

// Prefill sizes go through cuBLASLt (activations quantised to e4m3 per 128-group), the last
// N % 4 rows and small N through W8A16. Bound per element: the activation rounding (half an
// e4m3 ulp: 2^-4 |x_i| relative, or 2^-10 of the group scale for subnormals) times |w_i|,
// plus Hopper's FP8 accumulation (2^-9 of sum|x w|, as fp8_linear_test); the W8A16 rows meet
// it with room to spare.
TEST_F(Fp8W8A16Test, ProjectionDispatchMatchesReference) {
  std::mt19937 rng(3);
  for (const auto& [m, k] : {std::array<int64_t, 2>{256, 1024}, {1024, 4096}}) {
    const Fp8Weight w = MakeWeight(rng, m, k, true);
    const DeviceWeight dw = Put(w);
    const size_t workspace_bytes = cuda::Fp8ProjectionWorkspaceBytes(k, m);
    ASSERT_GT(workspace_bytes, 0u);
    cuda::DeviceBuffer workspace = Poisoned(workspace_bytes);
    for (int64_t n : {64, 65, 130, 259}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " M=" + std::to_string(m) + " K=" + std::to_string(k));
      const std::vector<float> x = MakeActivations(rng, n, k);
      const Reference ref = Compute(x, w, n);
      cuda::DeviceBuffer x_d = Upload(ToBF16(x));
      const size_t count = static_cast<size_t>(n * m);
      cuda::DeviceBuffer y = Poisoned(count * 4);
      cuda::Fp8ProjectionArgs a;
      a.x = View(x_d, DType::kBF16, {n, k});
      a.w = View(dw.codes, DType::kF8E4M3, {m, k});
      a.w_scale = View(dw.scales, DType::kF32, {m / kBlock, k / kBlock});
      a.y = View(y, DType::kF32, {n, m});
      a.workspace = View(workspace, DType::kU8, {static_cast<int64_t>(workspace_bytes)});
      PG_ASSERT_OK(cuda::Fp8Projection(blas_, a, stream_.get()));
      Sync();
      const std::vector<float> got = Download<float>(y, count);
      size_t worst = 0;
      double worst_ratio = -1;
      for (int64_t t = 0; t < n; ++t) {
        // Group scales as Fp8Linear computes them (amax / 448, not rounded to a power of two).
        std::vector<double> quant_err(static_cast<size_t>(k));
        for (int64_t g = 0; g < k / kBlock; ++g) {
          float amax = 0;
          for (int64_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(t * k + g * kBlock + i)]));
          const double sc = std::max(amax, 1e-4f) / 448.0;
          for (int64_t i = 0; i < kBlock; ++i) {
            const auto at = static_cast<size_t>(t * k + g * kBlock + i);
            quant_err[static_cast<size_t>(g * kBlock + i)] = std::fabs(x[at]) / 16 + sc / 1024;
          }
        }
        for (int64_t o = 0; o < m; ++o) {
          double bound = std::ldexp(1.0, -8) * ref.abs_sum[static_cast<size_t>(t * m + o)] + 1e-30;
          for (int64_t i = 0; i < k; ++i)
            bound += quant_err[static_cast<size_t>(i)] * std::fabs(w.dequant[static_cast<size_t>(o * k + i)]);
          const auto j = static_cast<size_t>(t * m + o);
          ASSERT_TRUE(std::isfinite(got[j])) << "non-finite at row " << t << " column " << o;
          const double ratio = std::fabs(got[j] - ref.want[j]) / bound;
          if (ratio > worst_ratio) worst_ratio = ratio, worst = j;
        }
      }
      EXPECT_LE(worst_ratio, 1.0) << "element " << worst << " (row " << worst / static_cast<size_t>(m) << ") got "
                                  << got[worst] << " want " << ref.want[worst];
      // N <= 64 is W8A16 itself.
      if (n <= cuda::kFp8W8A16MaxRows) {
        cuda::DeviceBuffer y2 = Poisoned(count * 4);
        cuda::Fp8W8A16Args b{a.x, a.w, a.w_scale, View(y2, DType::kF32, {n, m})};
        PG_ASSERT_OK(cuda::Fp8W8A16Linear(b, stream_.get()));
        Sync();
        EXPECT_EQ(Download<uint32_t>(y2, count), Download<uint32_t>(y, count));
      }
    }
  }
}

// Host reference of kernels/quantize_fp8_blocks.cuh: the smallest power of two s with
// max(amax, 1e-4) <= 448 s, codes e4m3(w / s).
TEST_F(Fp8W8A16Test, QuantizeBlocksMatchesReferenceBitForBit) {
  std::mt19937 rng(21);
  for (const auto& [m, k] : {std::array<int64_t, 2>{130, 260}, {256, 128}, {1, 64}}) {
    SCOPED_TRACE("M=" + std::to_string(m) + " K=" + std::to_string(k));
    std::vector<float> w = RandomNormal(rng, static_cast<size_t>(m * k), 0.02f);
    for (int64_t r = 0; r < std::min<int64_t>(m, 128); ++r)
      for (int64_t c = 0; c < std::min<int64_t>(k, 128); ++c) w[static_cast<size_t>(r * k + c)] = 0.0f;  // an all-zero block
    if (m * k > 300) w[300] = 448.0f * 4.0f;  // exactly on a power-of-two boundary
    w = RoundedBF16(w);
    const int64_t rb = CeilDiv(m, kBlock), cb = CeilDiv(k, kBlock);
    std::vector<float> want_scale(static_cast<size_t>(rb * cb));
    std::vector<uint8_t> want_codes(w.size());
    for (int64_t br = 0; br < rb; ++br)
      for (int64_t bc = 0; bc < cb; ++bc) {
        float amax = 0;
        for (int64_t r = br * kBlock; r < std::min(m, (br + 1) * kBlock); ++r)
          for (int64_t c = bc * kBlock; c < std::min(k, (bc + 1) * kBlock); ++c)
            amax = std::max(amax, std::fabs(w[static_cast<size_t>(r * k + c)]));
        amax = std::max(amax, 1e-4f);
        float s = std::ldexp(1.0f, -40);
        while (448.0f * s < amax) s *= 2.0f;
        want_scale[static_cast<size_t>(br * cb + bc)] = s;
        for (int64_t r = br * kBlock; r < std::min(m, (br + 1) * kBlock); ++r)
          for (int64_t c = bc * kBlock; c < std::min(k, (bc + 1) * kBlock); ++c)
            want_codes[static_cast<size_t>(r * k + c)] = F32ToE4M3(w[static_cast<size_t>(r * k + c)] / s);
      }
    cuda::DeviceBuffer w_d = Upload(ToBF16(w));
    cuda::DeviceBuffer q_d = Poisoned(w.size(), 0x7f), s_d = Poisoned(want_scale.size() * 4);
    PG_ASSERT_OK(cuda::QuantizeFp8Blocks(
        {View(w_d, DType::kBF16, {m, k}), View(q_d, DType::kF8E4M3, {m, k}), View(s_d, DType::kF32, {rb, cb})},
        stream_.get()));
    Sync();
    const std::vector<float> scales = Download<float>(s_d, want_scale.size());
    for (size_t i = 0; i < scales.size(); ++i) ASSERT_EQ(scales[i], want_scale[i]) << "scale " << i;
    const std::vector<uint8_t> codes = Download<uint8_t>(q_d, want_codes.size());
    for (size_t i = 0; i < codes.size(); ++i)
      ASSERT_EQ(codes[i], want_codes[i]) << "code " << i << " (w=" << w[i] << ")";
  }
}

// Captured once, replayed on new inputs: identical to eager (decode with a cluster K split,
// and a prefill-sized dispatch).
TEST_F(Fp8W8A16Test, CapturedMatchesEager) {
  std::mt19937 rng(9);
  const int64_t m = 512, k = 4096;
  const Fp8Weight w = MakeWeight(rng, m, k, true);
  const DeviceWeight dw = Put(w);
  const size_t workspace_bytes = cuda::Fp8ProjectionWorkspaceBytes(k, m);
  cuda::DeviceBuffer workspace = Poisoned(workspace_bytes);
  for (int64_t n : {5, 100}) {
    SCOPED_TRACE("N=" + std::to_string(n));
    const size_t count = static_cast<size_t>(n * m);
    cuda::DeviceBuffer x_d = Upload(ToBF16(MakeActivations(rng, n, k)));
    cuda::DeviceBuffer y_graph = Poisoned(count * 2), y_eager = Poisoned(count * 2);
    auto args = [&](const cuda::DeviceBuffer& y) {
      cuda::Fp8ProjectionArgs a;
      a.x = View(x_d, DType::kBF16, {n, k});
      a.w = View(dw.codes, DType::kF8E4M3, {m, k});
      a.w_scale = View(dw.scales, DType::kF32, {m / kBlock, k / kBlock});
      a.y = View(y, DType::kBF16, {n, m});
      a.workspace = View(workspace, DType::kU8, {static_cast<int64_t>(workspace_bytes)});
      return a;
    };
    PG_ASSERT_OK(cuda::Graph::BeginCapture(stream_.get()));
    const Status captured = cuda::Fp8Projection(blas_, args(y_graph), stream_.get());
    auto graph = cuda::Graph::EndCapture(stream_.get());
    PG_ASSERT_OK(captured);
    ASSERT_TRUE(graph.ok()) << graph.status().ToString();
    for (int round = 0; round < 2; ++round) {
      if (round > 0) CopyIn(x_d, ToBF16(MakeActivations(rng, n, k)));
      Poison(y_graph);
      PG_ASSERT_OK(graph.value().Launch(stream_.get()));
      PG_ASSERT_OK(cuda::Fp8Projection(blas_, args(y_eager), stream_.get()));
      Sync();
      ASSERT_EQ(Download<uint16_t>(y_graph, count), Download<uint16_t>(y_eager, count)) << "round " << round;
    }
  }
}

TEST(Fp8W8A16Checks, RejectNamingTheTensor) {
  const int64_t n = 3, k = 320, m = 200;
  const auto good = [&] {
    return cuda::Fp8W8A16Args{FakeDeviceTensor(0x10000, DType::kBF16, {n, k}),
                              FakeDeviceTensor(0x20000, DType::kF8E4M3, {m, k}),
                              FakeDeviceTensor(0x30000, DType::kF32, {2, 3}),
                              FakeDeviceTensor(0x40000, DType::kF32, {n, m})};
  };
  cuda::Fp8W8A16Args a = good();
  a.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, k + 1});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "w:");
  a = good();
  a.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, 100});
  a.w = FakeDeviceTensor(0x20000, DType::kF8E4M3, {m, 100});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "K=100");
  a = good();
  a.w = FakeDeviceTensor(0x20000, DType::kU8, {m, k});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "w:");
  a = good();
  a.w = FakeDeviceTensor(0x20008, DType::kF8E4M3, {m, k});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "w:");
  a = good();
  a.w_scale = FakeDeviceTensor(0x30000, DType::kF32, {2, 2});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "w_scale:");
  a = good();
  a.y = FakeDeviceTensor(0x40000, DType::kF16, {n, m});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "y must be");
  a = good();
  a.y = FakeDeviceTensor(0x40000, DType::kF32, {n + 1, m});
  ExpectInvalidNaming(cuda::Fp8W8A16Linear(a, nullptr), "y:");
  // Zero tokens is a valid no-op.
  a = good();
  a.x = FakeDeviceTensor(0x10000, DType::kBF16, {0, k});
  a.y = FakeDeviceTensor(0x40000, DType::kF32, {0, m});
  EXPECT_TRUE(cuda::Fp8W8A16Linear(a, nullptr).ok());

  // The dispatch needs its workspace only for the cuBLASLt path.
  cuda::Blas blas;  // never reached
  cuda::Fp8ProjectionArgs p;
  p.x = FakeDeviceTensor(0x10000, DType::kBF16, {100, 256});
  p.w = FakeDeviceTensor(0x20000, DType::kF8E4M3, {384, 256});
  p.w_scale = FakeDeviceTensor(0x30000, DType::kF32, {3, 2});
  p.y = FakeDeviceTensor(0x40000, DType::kBF16, {100, 384});
  p.workspace = FakeDeviceTensor(0x50000, DType::kU8, {64});
  ExpectInvalidNaming(cuda::Fp8Projection(blas, p, nullptr), "workspace:");
  p.x = FakeDeviceTensor(0x10000, DType::kBF16, {100, 255});
  ExpectInvalidNaming(cuda::Fp8Projection(blas, p, nullptr), "w:");

  cuda::QuantizeFp8BlocksArgs q{FakeDeviceTensor(0x10000, DType::kBF16, {m, k}),
                                FakeDeviceTensor(0x20000, DType::kF8E4M3, {m, k}),
                                FakeDeviceTensor(0x30000, DType::kF32, {2, 2})};
  ExpectInvalidNaming(cuda::QuantizeFp8Blocks(q, nullptr), "scale:");
  q.scale = FakeDeviceTensor(0x30000, DType::kF32, {2, 3});
  q.q = FakeDeviceTensor(0x20000, DType::kF8E4M3, {m, k - 1});
  ExpectInvalidNaming(cuda::QuantizeFp8Blocks(q, nullptr), "q:");
}

}  // namespace
}  // namespace peregrine::testing
