// The batch-invariant bf16 projection (kernels/bf16_linear.cuh, --enable-deterministic-inference)
// against a CPU reference summed in double, over N = 1..300 and shapes with partial row tiles,
// a partial last K unit, K split over a cluster and V4-like sizes; bf16 and f32 outputs; each
// row's bits the same in every batch and at every offset; strided rows; Linear, Fp8Projection
// and GroupedOutputProjection switched by Blas::set_batch_invariant; launcher checks. The
// decode-sized projection (kernels/bf16_gemv.cuh, the default path at N <= 4) against the same
// reference: partial K steps, rows split over warps, strided and grouped rows, Linear's dispatch.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "backend/cuda/blas.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/output_projection.h"
#include "gpu_test_util.h"
#include "kernels/bf16_gemv.cuh"
#include "kernels/bf16_linear.cuh"

namespace peregrine::testing {
namespace {

struct Reference {
  std::vector<double> want;     // [N, M]
  std::vector<double> abs_sum;  // [N, M] sums of |x w|
};

Reference Compute(const std::vector<float>& x, const std::vector<float>& w, int64_t n, int64_t m, int64_t k) {
  Reference r{std::vector<double>(static_cast<size_t>(n * m)), std::vector<double>(static_cast<size_t>(n * m))};
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < m; ++o) {
      double dot = 0, abs_dot = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(x[static_cast<size_t>(t * k + i)]) * w[static_cast<size_t>(o * k + i)];
        dot += p;
        abs_dot += std::fabs(p);
      }
      r.want[static_cast<size_t>(t * m + o)] = dot;
      r.abs_sum[static_cast<size_t>(t * m + o)] = abs_dot;
    }
  return r;
}

// bf16 products are exact in the MMA's fp32; only the fp32 accumulation differs from the exact
// sum: one fp32 ulp of the running magnitude per addition, (K + 64) * 2^-23 * sum|x w|, plus
// one bf16 rounding (2^-8 |want|) for a bf16 y. A wrong permutation or tile is O(sum|x w|) off.
::testing::AssertionResult WithinBound(const std::vector<float>& got, const Reference& ref, int64_t k, bool bf16_out) {
  const double accumulation = static_cast<double>(k + 64) * std::ldexp(1.0, -23);
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << "non-finite at " << i;
    const double bound =
        accumulation * ref.abs_sum[i] + (bf16_out ? std::ldexp(std::fabs(ref.want[i]), -8) : 0.0) + 1e-30;
    if (std::fabs(got[i] - ref.want[i]) > bound)
      return ::testing::AssertionFailure() << "element " << i << " got " << got[i] << " want " << ref.want[i];
  }
  return ::testing::AssertionSuccess();
}

// The f32 and bf16 outputs of one call shape (the first got32.size() outputs of `ref`): each
// within the reference's bound, and the bf16 one exactly the f32 one rounded.
::testing::AssertionResult BothOutputsMatch(const std::vector<float>& got32, const std::vector<float>& got16,
                                            const Reference& ref, int64_t k) {
  const auto count = static_cast<int64_t>(got32.size());
  const Reference head{std::vector<double>(ref.want.begin(), ref.want.begin() + count),
                       std::vector<double>(ref.abs_sum.begin(), ref.abs_sum.begin() + count)};
  if (auto r = WithinBound(got32, head, k, false); !r) return r << " (f32 y)";
  if (auto r = WithinBound(got16, head, k, true); !r) return r << " (bf16 y)";
  for (size_t i = 0; i < got32.size(); ++i)
    if (got16[i] != RoundBF16(got32[i]))
      return ::testing::AssertionFailure() << "bf16 y at " << i << " is " << got16[i] << ", not the f32 y rounded";
  return ::testing::AssertionSuccess();
}

// cuda::Linear of x and w into y32 (f32) and into y16 (bf16): the two calls every shape checks.
Status LinearBothOutputs(cuda::Blas& blas, const Tensor& x, const Tensor& w, const Tensor& y32, const Tensor& y16,
                         cudaStream_t stream) {
  PG_RETURN_IF_ERROR(cuda::Linear(blas, {x, w, y32}, stream));
  return cuda::Linear(blas, {x, w, y16}, stream);
}

::testing::AssertionResult SameBits(const std::vector<float>& a, const std::vector<float>& b, int64_t m) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]))
      return ::testing::AssertionFailure() << "row " << i / static_cast<size_t>(m) << " column "
                                           << i % static_cast<size_t>(m) << ": " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

class Bf16LinearTest : public BlasGpuTest {
 protected:
  void SetUp() override {
    BlasGpuTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    blas_.set_batch_invariant(true);
  }
};

struct Case {
  int64_t m, k;
};
// Partial row tiles (33, 200), a partial last K unit (K = 80, 336), K split over the cluster
// (M = 64, K = 4096: 2 row tiles), V4-like shapes (q_lora 1024 -> heads, hidden -> kv, ...).
constexpr Case kCases[] = {{16, 64}, {33, 80}, {200, 336}, {64, 4096}, {512, 4096}, {1024, 1024}, {4096, 512}};
// Every CTA width (8, 16, 32, 64 tokens) with full and partial token tiles.
constexpr int64_t kBatches[] = {300, 129, 64, 33, 32, 17, 16, 9, 8, 7, 2, 1};

TEST_F(Bf16LinearTest, MatchesReferenceAndEveryRowIsBatchInvariant) {
  std::mt19937 rng(11);
  for (const Case& c : kCases) {
    const int64_t n_max = kBatches[0];
    const std::vector<float> x = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n_max * c.k)));
    const std::vector<float> w =
        RoundedBF16(RandomNormal(rng, static_cast<size_t>(c.m * c.k), 1.0f / std::sqrt(static_cast<float>(c.k))));
    const Reference ref = Compute(x, w, n_max, c.m, c.k);
    cuda::DeviceBuffer x_d = Upload(ToBF16(x)), w_d = Upload(ToBF16(w));
    const size_t row_bytes = static_cast<size_t>(c.k) * 2;
    std::vector<float> at_max;
    for (const int64_t n : kBatches) {
      SCOPED_TRACE("N=" + std::to_string(n) + " M=" + std::to_string(c.m) + " K=" + std::to_string(c.k));
      const size_t count = static_cast<size_t>(n * c.m);
      cuda::DeviceBuffer y32 = Poisoned(count * 4), y16 = Poisoned(count * 2);
      PG_ASSERT_OK(LinearBothOutputs(blas_, View(x_d, DType::kBF16, {n, c.k}), View(w_d, DType::kBF16, {c.m, c.k}),
                                     View(y32, DType::kF32, {n, c.m}), View(y16, DType::kBF16, {n, c.m}),
                                     stream_.get()));
      Sync();
      const std::vector<float> got32 = Download<float>(y32, count), got16 = DownloadBF16(y16, count);
      ASSERT_TRUE(BothOutputsMatch(got32, got16, ref, c.k));
      if (at_max.empty()) {
        at_max = got32;
        continue;
      }
      EXPECT_TRUE(SameBits(got32, std::vector<float>(at_max.begin(), at_max.begin() + static_cast<int64_t>(count)), c.m));
      // The same rows later in a batch: row r of x at row 5 + r.
      if (n + 5 <= n_max) {
        cuda::DeviceBuffer shifted = Poisoned(static_cast<size_t>(n + 5) * row_bytes);
        std::vector<float> placed(static_cast<size_t>((n + 5) * c.k), 0.5f);
        std::copy(x.begin(), x.begin() + static_cast<int64_t>(n * c.k), placed.begin() + 5 * c.k);
        CopyIn(shifted, ToBF16(placed));
        cuda::DeviceBuffer y = Poisoned(static_cast<size_t>((n + 5) * c.m) * 4);
        PG_ASSERT_OK(cuda::Linear(blas_, {View(shifted, DType::kBF16, {n + 5, c.k}), View(w_d, DType::kBF16, {c.m, c.k}),
                                          View(y, DType::kF32, {n + 5, c.m})},
                                  stream_.get()));
        Sync();
        const std::vector<float> all = Download<float>(y, static_cast<size_t>((n + 5) * c.m));
        EXPECT_TRUE(SameBits(std::vector<float>(all.begin() + 5 * c.m, all.end()),
                             std::vector<float>(at_max.begin(), at_max.begin() + static_cast<int64_t>(count)), c.m))
            << "rows moved 5 down";
      }
    }
  }
}

// Strided rows (a head group of each row, as the grouped output projection reads them): the
// same bits as the contiguous call on the gathered rows.
TEST_F(Bf16LinearTest, StridedRowsMatchContiguousOnes) {
  std::mt19937 rng(5);
  const int64_t n = 37, k = 256, m = 96, x_stride = 1024, y_stride = 320, offset = 512;
  const std::vector<float> wide = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n * x_stride)));
  const std::vector<float> w = RoundedBF16(RandomNormal(rng, static_cast<size_t>(m * k), 0.1f));
  std::vector<float> packed(static_cast<size_t>(n * k));
  for (int64_t t = 0; t < n; ++t)
    std::copy_n(wide.begin() + t * x_stride + offset, k, packed.begin() + t * k);
  cuda::DeviceBuffer wide_d = Upload(ToBF16(wide)), packed_d = Upload(ToBF16(packed)), w_d = Upload(ToBF16(w));
  cuda::DeviceBuffer y_wide = Poisoned(static_cast<size_t>(n * y_stride) * 4), y = Poisoned(static_cast<size_t>(n * m) * 4);
  cuda::StridedLinearArgs s;
  s.x = static_cast<const char*>(wide_d.data()) + offset * 2;
  s.x_stride = x_stride;
  s.w = w_d.data();
  s.y = static_cast<char*>(y_wide.data()) + 64 * 4;
  s.y_f32 = true;
  s.y_stride = y_stride;
  s.n = n;
  s.m = m;
  s.k = k;
  PG_ASSERT_OK(cuda::BatchInvariantLinear(blas_, s, stream_.get()));
  PG_ASSERT_OK(cuda::Linear(blas_, {View(packed_d, DType::kBF16, {n, k}), View(w_d, DType::kBF16, {m, k}),
                                    View(y, DType::kF32, {n, m})},
                            stream_.get()));
  Sync();
  const std::vector<float> got_wide = Download<float>(y_wide, static_cast<size_t>(n * y_stride));
  const std::vector<float> got = Download<float>(y, static_cast<size_t>(n * m));
  std::vector<float> gathered(static_cast<size_t>(n * m));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(got_wide.begin() + t * y_stride + 64, m, gathered.begin() + t * m);
    // Columns around the written ones keep their poison.
    EXPECT_TRUE(std::isnan(got_wide[static_cast<size_t>(t * y_stride + 63)])) << t;
    EXPECT_TRUE(std::isnan(got_wide[static_cast<size_t>(t * y_stride + 64 + m)])) << t;
  }
  EXPECT_TRUE(SameBits(gathered, got, m));
}

// The grouped output projection in batch-invariant mode: close to the cuBLAS path, and each
// row's bits independent of the batch.
TEST_F(Bf16LinearTest, GroupedOutputProjectionIsBatchInvariant) {
  std::mt19937 rng(9);
  const int64_t heads = 8, dim = 64, groups = 4, rank = 32, hidden = 256, n_max = 70;
  const int64_t group_in = heads * dim / groups;
  const std::vector<float> o = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n_max * heads * dim)));
  const std::vector<float> wo_a = RoundedBF16(RandomNormal(rng, static_cast<size_t>(groups * rank * group_in), 0.05f));
  const std::vector<float> wo_b = RoundedBF16(RandomNormal(rng, static_cast<size_t>(hidden * groups * rank), 0.05f));
  cuda::DeviceBuffer o_d = Upload(ToBF16(o)), a_d = Upload(ToBF16(wo_a)), b_d = Upload(ToBF16(wo_b));
  auto run = [&](int64_t n, bool invariant) {
    blas_.set_batch_invariant(invariant);
    cuda::DeviceBuffer mid = Poisoned(static_cast<size_t>(n * groups * rank) * 2);
    cuda::DeviceBuffer out = Poisoned(static_cast<size_t>(n * hidden) * 2);
    cuda::OutputProjectionArgs a;
    a.o = View(o_d, DType::kBF16, {n, heads, dim});
    a.wo_a = View(a_d, DType::kBF16, {groups, rank, group_in});
    a.wo_b = View(b_d, DType::kBF16, {hidden, groups * rank});
    a.mid = View(mid, DType::kBF16, {n, groups, rank});
    a.out = View(out, DType::kBF16, {n, hidden});
    const Status s = cuda::GroupedOutputProjection(blas_, a, stream_.get());
    EXPECT_TRUE(s.ok()) << s.ToString();
    Sync();
    return DownloadBF16(out, static_cast<size_t>(n * hidden));
  };
  const std::vector<float> cublas = run(n_max, false);
  const std::vector<float> full = run(n_max, true);
  double err = 0, norm = 0;
  for (size_t i = 0; i < full.size(); ++i) {
    err += (full[i] - cublas[i]) * (full[i] - cublas[i]);
    norm += cublas[i] * cublas[i];
  }
  EXPECT_LT(std::sqrt(err / norm), 1e-2) << "batch-invariant and cuBLAS output projections disagree";
  for (int64_t n : {1, 3, 17, 64}) {
    const std::vector<float> part = run(n, true);
    EXPECT_TRUE(SameBits(part, std::vector<float>(full.begin(), full.begin() + n * hidden), hidden)) << "N=" << n;
  }
}

TEST_F(Bf16LinearTest, RejectsWhatItCannotServe) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  // f32 activations have no batch-invariant kernel.
  EXPECT_EQ(cuda::Linear(blas_, {View(buf, DType::kF32, {4, 64}), View(buf, DType::kF32, {8, 64}),
                                 View(buf, DType::kF32, {4, 8})},
                         stream_.get())
                .code(),
            StatusCode::kInvalidArgument);
  // K not a multiple of 16.
  EXPECT_EQ(cuda::Linear(blas_, {View(buf, DType::kBF16, {4, 40}), View(buf, DType::kBF16, {8, 40}),
                                 View(buf, DType::kF32, {4, 8})},
                         stream_.get())
                .code(),
            StatusCode::kInvalidArgument);
  kernels::Bf16LinearParams p;
  p.n = 1;
  p.m = 8;
  p.k = 40;
  p.x_stride = 40;
  p.y_stride = 8;
  EXPECT_EQ(kernels::LaunchBf16Linear(p, stream_.get()), cudaErrorInvalidValue);
}

class Bf16GemvTest : public BlasGpuTest {};

// One row (M = 1), partial 256-wide K steps (K = 8, 136, 4104), rows split over 2-8 warps (few
// rows, long K), several rows per warp (M = 4096, 8192 past the grid's cap), V4-like sizes;
// N = 1..4 with every token count's kernel.
constexpr Case kGemvCases[] = {{1, 8},     {3, 136},    {129, 1024}, {1000, 4104}, {64, 4096},
                               {4096, 512}, {33, 256},   {1024, 8192}, {8192, 1024}};

TEST_F(Bf16GemvTest, MatchesReferenceAndLinearDispatchesToIt) {
  std::mt19937 rng(17);
  for (const Case& c : kGemvCases) {
    const int64_t n_max = kernels::kBf16GemvMaxTokens;
    const std::vector<float> x = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n_max * c.k)));
    const std::vector<float> w =
        RoundedBF16(RandomNormal(rng, static_cast<size_t>(c.m * c.k), 1.0f / std::sqrt(static_cast<float>(c.k))));
    const Reference ref = Compute(x, w, n_max, c.m, c.k);
    cuda::DeviceBuffer x_d = Upload(ToBF16(x)), w_d = Upload(ToBF16(w));
    for (int64_t n = 1; n <= n_max; ++n) {
      SCOPED_TRACE("N=" + std::to_string(n) + " M=" + std::to_string(c.m) + " K=" + std::to_string(c.k));
      const size_t count = static_cast<size_t>(n * c.m);
      cuda::DeviceBuffer y32 = Poisoned(count * 4), y16 = Poisoned(count * 2), direct = Poisoned(count * 4);
      PG_ASSERT_OK(LinearBothOutputs(blas_, View(x_d, DType::kBF16, {n, c.k}), View(w_d, DType::kBF16, {c.m, c.k}),
                                     View(y32, DType::kF32, {n, c.m}), View(y16, DType::kBF16, {n, c.m}),
                                     stream_.get()));
      cuda::StridedLinearArgs s;
      s.x = x_d.data();
      s.x_stride = c.k;
      s.w = w_d.data();
      s.y = direct.data();
      s.y_f32 = true;
      s.y_stride = c.m;
      s.n = n;
      s.m = c.m;
      s.k = c.k;
      PG_ASSERT_OK(cuda::DecodeLinear(blas_, s, stream_.get()));
      Sync();
      const std::vector<float> got32 = Download<float>(y32, count), got16 = DownloadBF16(y16, count);
      ASSERT_TRUE(BothOutputsMatch(got32, got16, ref, c.k));
      // Linear took the decode kernel: its bits, not cuBLAS's.
      EXPECT_TRUE(SameBits(got32, Download<float>(direct, count), c.m));
    }
  }
}

// Strided, grouped rows (the grouped output projection's head groups): each group within the
// reference's bound on its gathered rows, and what lies past the written columns keeps its poison.
TEST_F(Bf16GemvTest, GroupedStridedRowsMatchReference) {
  std::mt19937 rng(23);
  const int64_t n = 3, k = 512, m = 96, groups = 4, x_stride = groups * k, y_stride = groups * m + 8;
  const std::vector<float> x = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n * x_stride)));
  const std::vector<float> w = RoundedBF16(RandomNormal(rng, static_cast<size_t>(groups * m * k), 0.05f));
  cuda::DeviceBuffer x_d = Upload(ToBF16(x)), w_d = Upload(ToBF16(w));
  cuda::DeviceBuffer y = Poisoned(static_cast<size_t>(n * y_stride) * 4);
  cuda::StridedLinearArgs s;
  s.x = x_d.data();
  s.x_stride = x_stride;
  s.w = w_d.data();
  s.y = y.data();
  s.y_f32 = true;
  s.y_stride = y_stride;
  s.n = n;
  s.m = m;
  s.k = k;
  s.groups = groups;
  s.x_group = k;
  s.w_group = m * k;
  s.y_group = m;
  PG_ASSERT_OK(cuda::DecodeLinear(blas_, s, stream_.get()));
  Sync();
  const std::vector<float> got = Download<float>(y, static_cast<size_t>(n * y_stride));
  for (int64_t g = 0; g < groups; ++g) {
    SCOPED_TRACE("group " + std::to_string(g));
    std::vector<float> xg(static_cast<size_t>(n * k)), yg(static_cast<size_t>(n * m));
    for (int64_t t = 0; t < n; ++t) {
      std::copy_n(x.begin() + t * x_stride + g * k, k, xg.begin() + t * k);
      std::copy_n(got.begin() + t * y_stride + g * m, m, yg.begin() + t * m);
    }
    const std::vector<float> wg(w.begin() + g * m * k, w.begin() + (g + 1) * m * k);
    EXPECT_TRUE(WithinBound(yg, Compute(xg, wg, n, m, k), k, false));
  }
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = groups * m; o < y_stride; ++o) EXPECT_TRUE(std::isnan(got[static_cast<size_t>(t * y_stride + o)]));
}

TEST_F(Bf16GemvTest, RejectsWhatItCannotServe) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::StridedLinearArgs s;
  s.x = buf.data();
  s.w = buf.data();
  s.y = buf.data();
  s.n = 5;  // past kBf16GemvMaxTokens
  s.m = 8;
  s.k = 64;
  s.x_stride = 64;
  s.y_stride = 8;
  EXPECT_FALSE(cuda::FitsDecodeLinear(s));
  EXPECT_EQ(cuda::DecodeLinear(blas_, s, stream_.get()).code(), StatusCode::kInvalidArgument);
  s.n = 2;
  s.k = 60;  // not a multiple of 8
  s.x_stride = 64;
  EXPECT_FALSE(cuda::FitsDecodeLinear(s));
  s.k = 64;
  s.x = static_cast<const char*>(buf.data()) + 8;  // misaligned
  EXPECT_FALSE(cuda::FitsDecodeLinear(s));
  s.x = buf.data();
  EXPECT_TRUE(cuda::FitsDecodeLinear(s));
  kernels::Bf16GemvParams p;
  p.n = 1;
  p.m = 8;
  p.k = 64;
  p.x_stride = 64;
  p.y_stride = 8;
  p.warps_per_row = 3;  // must divide the CTA's 8 warps
  p.max_ctas = 4;
  EXPECT_EQ(kernels::LaunchBf16Gemv(p, stream_.get()), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace peregrine::testing
