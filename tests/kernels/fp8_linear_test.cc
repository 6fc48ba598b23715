// The block-scaled FP8 projection: the activation quantisation against a CPU reference (bit
// for bit: e4m3 codes and fp32 scales), Fp8Linear against a CPU product of the operands
// dequantised exactly as the GPU sees them, and against the bf16 cuBLAS projection on the
// unquantised values; one capture; launcher checks (these run without a GPU).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "backend/cuda/blas.h"
#include "backend/cuda/ops/fp8_linear.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/stream.h"
#include "gpu_test_util.h"
#include "kernels/quantize_fp8.cuh"
#include "launcher_check_util.h"

namespace peregrine::testing {
namespace {

constexpr int64_t kGroup = 128;

// The CPU reference of kernels/quantize_fp8.cuh: the same float operations in the same order.
struct Quantized {
  std::vector<uint8_t> codes;  // [N, K] e4m3
  std::vector<float> scales;   // [N, K / 128]
};

float GroupScale(float amax, bool pow2) {
  float s = std::max(amax, kernels::kFp8ActAmaxFloor) / kernels::kFp8E4M3Max;
  if (pow2) {
    const uint32_t bits = std::bit_cast<uint32_t>(s);
    const uint32_t exp_bits = bits & 0x7f800000u;
    s = std::bit_cast<float>((bits & 0x007fffffu) != 0 ? exp_bits + 0x00800000u : exp_bits);
  }
  return s;
}

Quantized QuantizeReference(const std::vector<float>& x, int64_t n, int64_t k, bool pow2) {
  Quantized q{std::vector<uint8_t>(x.size()), std::vector<float>(static_cast<size_t>(n * k / kGroup))};
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t g = 0; g < k / kGroup; ++g) {
      const float* v = x.data() + t * k + g * kGroup;
      float amax = 0.0f;
      for (int64_t i = 0; i < kGroup; ++i) amax = std::max(amax, std::fabs(v[i]));
      const float s = GroupScale(amax, pow2);
      q.scales[static_cast<size_t>(t * (k / kGroup) + g)] = s;
      for (int64_t i = 0; i < kGroup; ++i) q.codes[static_cast<size_t>(t * k + g * kGroup + i)] = F32ToE4M3(v[i] / s);
    }
  }
  return q;
}

// bf16-representable activations whose rows and groups span several decades, with one
// all-zero group (the amax floor) and a few outliers per row.
std::vector<float> MakeActivations(std::mt19937& rng, int64_t n, int64_t k) {
  std::vector<float> x = RandomNormal(rng, static_cast<size_t>(n * k));
  std::uniform_real_distribution<float> decade(-3.0f, 3.0f);
  std::uniform_int_distribution<int64_t> column(0, k - 1);
  for (int64_t t = 0; t < n; ++t) {
    const float row_scale = std::pow(10.0f, decade(rng));
    for (int64_t i = 0; i < k; ++i) x[static_cast<size_t>(t * k + i)] *= row_scale;
    for (int j = 0; j < 3; ++j) x[static_cast<size_t>(t * k + column(rng))] *= 40.0f;
  }
  if (n > 1) std::fill_n(x.begin() + k, kGroup, 0.0f);  // row 1, group 0
  return RoundedBF16(x);
}

// Random e4m3 weight codes and power-of-two block scales (what the checkpoint's ue8m0
// scales become), never NaN.
struct Fp8Weight {
  std::vector<uint8_t> codes;  // [M, K]
  std::vector<float> scales;   // [M / 128, K / 128]
  std::vector<float> dequant;  // [M, K] codes * scales, exact
};

Fp8Weight MakeWeight(std::mt19937& rng, int64_t m, int64_t k) {
  Fp8Weight w;
  const std::vector<float> raw = RandomNormal(rng, static_cast<size_t>(m * k), 64.0f);
  w.codes.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) w.codes[i] = F32ToE4M3(raw[i]);
  std::uniform_int_distribution<int> exponent(-13, -9);
  w.scales.resize(static_cast<size_t>(m / kGroup * (k / kGroup)));
  for (float& s : w.scales) s = std::ldexp(1.0f, exponent(rng));
  w.dequant.resize(raw.size());
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < k; ++c) {
      const auto i = static_cast<size_t>(r * k + c);
      w.dequant[i] = E4M3ToF32(w.codes[i]) * w.scales[static_cast<size_t>(r / kGroup * (k / kGroup) + c / kGroup)];
    }
  return w;
}

// Per-element bound check; the message names the worst element relative to its bound.
::testing::AssertionResult WithinBounds(const std::vector<float>& got, const std::vector<double>& want,
                                        const std::vector<double>& bound, const std::string& what) {
  size_t worst = 0;
  double worst_ratio = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i])) return ::testing::AssertionFailure() << what << ": NaN at " << i;
    const double ratio = std::fabs(got[i] - want[i]) / std::max(bound[i], 1e-30);
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (worst_ratio <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": element " << worst << " got " << got[worst] << " want "
                                       << want[worst] << " allowed " << bound[worst] << " (" << worst_ratio
                                       << "x the bound)";
}

class Fp8LinearTest : public BlasGpuTest {
 protected:

  cuda::Fp8LinearArgs Args(const cuda::DeviceBuffer& x, const cuda::DeviceBuffer& w, const cuda::DeviceBuffer& ws,
                           const cuda::DeviceBuffer& y, DType y_dtype, const cuda::DeviceBuffer& workspace, int64_t n,
                           int64_t k, int64_t m) {
    cuda::Fp8LinearArgs a;
    a.x = View(x, DType::kBF16, {n, k});
    a.w = View(w, DType::kF8E4M3, {m, k});
    a.w_scale = View(ws, DType::kF32, {m / kGroup, k / kGroup});
    a.y = View(y, y_dtype, {n, m});
    a.workspace = View(workspace, DType::kU8, {static_cast<int64_t>(cuda::Fp8LinearWorkspaceBytes(n, k, m))});
    return a;
  }

};

TEST_F(Fp8LinearTest, QuantizeMatchesReferenceBitForBit) {
  std::mt19937 rng(11);
  for (const auto& [n, k] : {std::array<int64_t, 2>{1, 128}, {3, 1024}, {17, 4096}, {300, 512}, {129, 7168}}) {
    for (bool pow2 : {false, true}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k) + (pow2 ? " pow2" : ""));
      const std::vector<float> x = MakeActivations(rng, n, k);
      const Quantized want = QuantizeReference(x, n, k, pow2);
      cuda::DeviceBuffer x_d = Upload(ToBF16(x));
      cuda::DeviceBuffer q_d = Poisoned(static_cast<size_t>(n * k), 0xff);
      cuda::DeviceBuffer s_d = Poisoned(want.scales.size() * sizeof(float));
      PG_ASSERT_OK(cuda::QuantizeFp8({View(x_d, DType::kBF16, {n, k}), View(q_d, DType::kF8E4M3, {n, k}),
                                      View(s_d, DType::kF32, {n, k / kGroup}), pow2},
                                     stream_.get()));
      Sync();
      const std::vector<uint8_t> codes = Download<uint8_t>(q_d, want.codes.size());
      const std::vector<float> scales = Download<float>(s_d, want.scales.size());
      for (size_t i = 0; i < codes.size(); ++i)
        ASSERT_EQ(codes[i], want.codes[i]) << "code " << i << " (x=" << x[i] << ")";
      for (size_t i = 0; i < scales.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(scales[i]), std::bit_cast<uint32_t>(want.scales[i]))
            << "scale " << i << ": " << scales[i] << " vs " << want.scales[i];
    }
  }
}

// Tolerances (per element, against exact products of the dequantised operands):
//  * vs the dequantised reference: the products of e4m3 codes are exact, so only the
//    accumulation differs: fp32 in some order, bounded by the textbook worst case
//    K * 2^-24 * sum|x_i w_i|, but never below 2^-10 * sum|x_i w_i| because Hopper's FP8 MMA
//    keeps only ~14 bits while it sums one 128-deep block (cuBLASLt then scales the block
//    and adds it in fp32). A wrong scale layout is off by O(1), far outside either.
//    A bf16 y adds one rounding, 2^-8 |want|.
//  * vs the bf16 projection of the unquantised x: the activation quantisation error, at most
//    2^-4 |x_i| (3-bit mantissa, round to nearest) or 2^-10 s for e4m3 subnormals, times
//    |w_i|, plus both accumulations; and the relative Frobenius error must stay under 6%
//    (e4m3's rounding noise is ~3% RMS).
TEST_F(Fp8LinearTest, MatchesDequantisedReferenceAndBf16Linear) {
  std::mt19937 rng(5);
  const std::array<std::array<int64_t, 2>, 4> shapes = {{{128, 128}, {512, 4096}, {4096, 1024}, {256, 384}}};
  for (const auto& [m, k] : shapes) {  // (256, 384) pads w_scale rows (K / 128 = 3) inside
    const Fp8Weight w = MakeWeight(rng, m, k);
    cuda::DeviceBuffer w_d = Upload(w.codes), ws_d = Upload(w.scales), wb_d = Upload(ToBF16(w.dequant));
    for (int64_t n : {1, 3, 17, 64, 300}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " M=" + std::to_string(m) + " K=" + std::to_string(k));
      const std::vector<float> x = MakeActivations(rng, n, k);
      const Quantized q = QuantizeReference(x, n, k, false);
      std::vector<double> want(static_cast<size_t>(n * m)), bound_f32(want.size()), bound_bf16(want.size());
      std::vector<double> want_unq(want.size()), bound_unq(want.size());
      // Hopper's FP8 MMA keeps only ~13-14 bits while it sums a 128-deep block: measured on an
      // H200 up to 1.28 x 2^-10 of sum|x w| (f32 output), so the floor is 2^-9.
      const double accumulation = std::max(static_cast<double>(k) * std::ldexp(1.0, -24), std::ldexp(1.0, -9));
      std::vector<double> xq(static_cast<size_t>(k)), xe(static_cast<size_t>(k));
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < k; ++i) {
          const double s = q.scales[static_cast<size_t>(t * (k / kGroup) + i / kGroup)];
          xq[static_cast<size_t>(i)] = E4M3ToF32(q.codes[static_cast<size_t>(t * k + i)]) * s;
          // The most one element's quantisation can be off: half an e4m3 ulp, 2^-4 relative
          // for normals, 2^-10 s for subnormals.
          xe[static_cast<size_t>(i)] = std::fabs(x[static_cast<size_t>(t * k + i)]) / 16 + s / 1024;
        }
        for (int64_t o = 0; o < m; ++o) {
          const float* wr = w.dequant.data() + o * k;
          const float* xr = x.data() + t * k;
          double dot = 0, abs_dot = 0, dot_unq = 0, abs_unq = 0, quant_err = 0;
          for (int64_t i = 0; i < k; ++i) {
            const double wi = wr[i], a = xq[static_cast<size_t>(i)], b = xr[i];
            dot += a * wi;
            abs_dot += std::fabs(a * wi);
            dot_unq += b * wi;
            abs_unq += std::fabs(b * wi);
            quant_err += xe[static_cast<size_t>(i)] * std::fabs(wi);
          }
          const auto j = static_cast<size_t>(t * m + o);
          want[j] = dot;
          bound_f32[j] = accumulation * abs_dot + 1e-30;
          bound_bf16[j] = bound_f32[j] + std::ldexp(std::fabs(dot), -8);
          want_unq[j] = dot_unq;
          bound_unq[j] = quant_err + accumulation * (abs_dot + abs_unq);
        }
      }

      cuda::DeviceBuffer x_d = Upload(ToBF16(x));
      cuda::DeviceBuffer workspace = Poisoned(cuda::Fp8LinearWorkspaceBytes(n, k, m));
      cuda::DeviceBuffer y32 = Poisoned(want.size() * 4), y16 = Poisoned(want.size() * 2);
      cuda::DeviceBuffer ylin = Poisoned(want.size() * 4);
      PG_ASSERT_OK(cuda::Fp8Linear(blas_, Args(x_d, w_d, ws_d, y16, DType::kBF16, workspace, n, k, m), stream_.get()));
      const Status f32 = cuda::Fp8Linear(blas_, Args(x_d, w_d, ws_d, y32, DType::kF32, workspace, n, k, m),
                                         stream_.get());
      PG_ASSERT_OK(cuda::Linear(blas_, {View(x_d, DType::kBF16, {n, k}), View(wb_d, DType::kBF16, {m, k}),
                                        View(ylin, DType::kF32, {n, m})},
                                stream_.get()));
      Sync();
      const std::vector<float> got16 = DownloadBF16(y16, want.size());
      EXPECT_TRUE(WithinBounds(got16, want, bound_bf16, "fp8 linear, bf16 y"));
      if (f32.code() == StatusCode::kUnimplemented) {
        // cuBLASLt may offer the block-scaled kernels for 16-bit outputs only.
        std::printf("note: f32 output not offered: %s\n", f32.ToString().c_str());
      } else {
        PG_ASSERT_OK(f32);
        EXPECT_TRUE(WithinBounds(Download<float>(y32, want.size()), want, bound_f32, "fp8 linear, f32 y"));
      }
      const std::vector<float> lin = Download<float>(ylin, want.size());
      std::vector<double> lin_d(lin.begin(), lin.end());
      EXPECT_TRUE(WithinBounds(got16, want_unq, bound_unq, "fp8 vs exact unquantised"));
      double diff2 = 0, norm2 = 0;
      for (size_t j = 0; j < lin.size(); ++j) {
        diff2 += (got16[j] - lin_d[j]) * (got16[j] - lin_d[j]);
        norm2 += lin_d[j] * lin_d[j];
      }
      EXPECT_LE(std::sqrt(diff2 / std::max(norm2, 1e-300)), 0.06) << "relative Frobenius error vs bf16 Linear";
    }
  }
}

// Captured once (the plan is built during capture), replayed on new inputs: identical to eager.
TEST_F(Fp8LinearTest, CapturedMatchesEager) {
  std::mt19937 rng(9);
  const int64_t n = 5, m = 512, k = 4096;
  const Fp8Weight w = MakeWeight(rng, m, k);
  cuda::DeviceBuffer w_d = Upload(w.codes), ws_d = Upload(w.scales);
  cuda::DeviceBuffer x_d = Upload(ToBF16(MakeActivations(rng, n, k)));
  cuda::DeviceBuffer workspace = Poisoned(cuda::Fp8LinearWorkspaceBytes(n, k, m));
  cuda::DeviceBuffer y_graph = Poisoned(static_cast<size_t>(n * m) * 2), y_eager = Poisoned(static_cast<size_t>(n * m) * 2);
  PG_ASSERT_OK(cuda::Graph::BeginCapture(stream_.get()));
  const Status captured =
      cuda::Fp8Linear(blas_, Args(x_d, w_d, ws_d, y_graph, DType::kBF16, workspace, n, k, m), stream_.get());
  auto graph = cuda::Graph::EndCapture(stream_.get());
  PG_ASSERT_OK(captured);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  for (int round = 0; round < 2; ++round) {
    if (round > 0) CopyIn(x_d, ToBF16(MakeActivations(rng, n, k)));
    Poison(y_graph);
    PG_ASSERT_OK(graph.value().Launch(stream_.get()));
    PG_ASSERT_OK(cuda::Fp8Linear(blas_, Args(x_d, w_d, ws_d, y_eager, DType::kBF16, workspace, n, k, m), stream_.get()));
    Sync();
    ASSERT_EQ(Download<uint16_t>(y_graph, static_cast<size_t>(n * m)), Download<uint16_t>(y_eager, static_cast<size_t>(n * m)))
        << "round " << round;
  }
}

TEST(Fp8LinearChecks, RejectNamingTheTensor) {
  const int64_t n = 3, k = 256, m = 384;
  const auto good = [&] {
    cuda::Fp8LinearArgs a;
    a.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, k});
    a.w = FakeDeviceTensor(0x20000, DType::kF8E4M3, {m, k});
    a.w_scale = FakeDeviceTensor(0x30000, DType::kF32, {m / kGroup, k / kGroup});
    a.y = FakeDeviceTensor(0x40000, DType::kBF16, {n, m});
    a.workspace = FakeDeviceTensor(0x50000, DType::kU8, {static_cast<int64_t>(cuda::Fp8LinearWorkspaceBytes(n, k, m))});
    return a;
  };
  cuda::Blas blas;  // never reached: every call below fails its checks first
  cuda::Fp8LinearArgs a = good();
  a.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, k + 1});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "w:");
  a = good();
  a.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, 200});
  a.w = FakeDeviceTensor(0x20000, DType::kF8E4M3, {m, 200});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "K=200");
  a = good();
  a.w = FakeDeviceTensor(0x20000, DType::kF8E4M3, {200, k});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "w: M=200");
  a = good();
  a.w = FakeDeviceTensor(0x20000, DType::kU8, {m, k});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "w:");
  a = good();
  a.w_scale = FakeDeviceTensor(0x30000, DType::kF32, {m / kGroup, k / kGroup + 1});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "w_scale:");
  a = good();
  a.y = FakeDeviceTensor(0x40000, DType::kBF16, {n, m + 128});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "y:");
  a = good();
  a.workspace = FakeDeviceTensor(0x50000, DType::kU8, {64});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "workspace:");
  a = good();
  a.workspace = FakeDeviceTensor(0x50010, DType::kU8, {static_cast<int64_t>(cuda::Fp8LinearWorkspaceBytes(n, k, m))});
  ExpectInvalidNaming(cuda::Fp8Linear(blas, a, nullptr), "workspace:");
  // Zero tokens is a valid no-op.
  a = good();
  a.x = FakeDeviceTensor(0x10000, DType::kBF16, {0, k});
  a.y = FakeDeviceTensor(0x40000, DType::kBF16, {0, m});
  EXPECT_TRUE(cuda::Fp8Linear(blas, a, nullptr).ok());

  cuda::QuantizeFp8Args q{FakeDeviceTensor(0x10000, DType::kBF16, {n, k}),
                          FakeDeviceTensor(0x20000, DType::kF8E4M3, {n, k}),
                          FakeDeviceTensor(0x30000, DType::kF32, {n, k / kGroup + 1})};
  ExpectInvalidNaming(cuda::QuantizeFp8(q, nullptr), "scale:");
  q.scale = FakeDeviceTensor(0x30000, DType::kF32, {n, k / kGroup});
  q.x_q = FakeDeviceTensor(0x20000, DType::kBF16, {n, k});
  ExpectInvalidNaming(cuda::QuantizeFp8(q, nullptr), "x_q:");
  q.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, 100});
  ExpectInvalidNaming(cuda::QuantizeFp8(q, nullptr), "x: K=100");
}

}  // namespace
}  // namespace peregrine::testing
