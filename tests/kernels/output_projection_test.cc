// Grouped low-rank output projection (cuBLAS) vs cpu::GroupedOutputProjection, at small
// shapes and DeepSeek-V4-Flash's (64 heads x 512, 8 groups, rank 1024, hidden 4096).
#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/ops/output_projection.h"
#include "gpu_test_util.h"

namespace peregrine::testing {
namespace {

class OutputProjectionTest : public GpuTest {
 protected:
  void Run(int64_t batch, int64_t heads, int64_t dim, int64_t groups, int64_t rank, int64_t hidden, uint32_t seed) {
    SCOPED_TRACE("B=" + std::to_string(batch) + " H=" + std::to_string(heads) + " D=" + std::to_string(dim) +
                 " G=" + std::to_string(groups) + " R=" + std::to_string(rank) + " hidden=" + std::to_string(hidden));
    std::mt19937 rng(seed);
    const int64_t group_in = heads * dim / groups;
    std::vector<float> o = RoundedBF16(RandomNormal(rng, static_cast<size_t>(batch * heads * dim)));
    const float sa = 1.0f / std::sqrt(static_cast<float>(group_in));
    const float sb = 1.0f / std::sqrt(static_cast<float>(groups * rank));
    std::vector<float> wo_a = RoundedBF16(RandomNormal(rng, static_cast<size_t>(groups * rank * group_in), sa));
    std::vector<float> wo_b = RoundedBF16(RandomNormal(rng, static_cast<size_t>(hidden * groups * rank), sb));
    std::vector<float> want(static_cast<size_t>(batch * hidden));
    cpu::ThreadPool pool(2);
    cpu::GroupedOutputProjection(pool, o.data(), wo_a.data(), wo_b.data(), batch, heads, dim, groups, rank, hidden,
                                 want.data());

    auto blas = cuda::Blas::Create(*allocator_);
    ASSERT_TRUE(blas.ok()) << blas.status().ToString();
    cuda::DeviceBuffer o_d = Upload(ToBF16(o)), a_d = Upload(ToBF16(wo_a)), b_d = Upload(ToBF16(wo_b));
    cuda::DeviceBuffer mid_d = Poisoned(static_cast<size_t>(batch * groups * rank) * 2);
    cuda::DeviceBuffer out_d = Poisoned(static_cast<size_t>(batch * hidden) * 2);
    cuda::OutputProjectionArgs args;
    args.o = View(o_d, DType::kBF16, {batch, heads, dim});
    args.wo_a = View(a_d, DType::kBF16, {groups, rank, group_in});
    args.wo_b = View(b_d, DType::kBF16, {hidden, groups * rank});
    args.mid = View(mid_d, DType::kBF16, {batch, groups, rank});
    args.out = View(out_d, DType::kBF16, {batch, hidden});
    PG_ASSERT_OK(cuda::GroupedOutputProjection(*blas, args, stream_.get()));
    const std::vector<float> got = DownloadBF16(out_d, want.size());
    // mid is rounded to bf16 between the GEMMs: one more bf16 rounding than the reference.
    EXPECT_TRUE(AllClose(got, want, {1e-2, 2e-2}, "out"));
  }
};

TEST_F(OutputProjectionTest, SmallShapes) {
  uint32_t seed = 1;
  for (int64_t batch : {1, 3, 17}) {
    Run(batch, 8, 64, 2, 32, 96, seed++);
    Run(batch, 8, 64, 4, 24, 40, seed++);
  }
}

TEST_F(OutputProjectionTest, DeepSeekV4FlashShape) { Run(3, 64, 512, 8, 1024, 4096, 42); }

TEST_F(OutputProjectionTest, RejectsIndivisibleGroups) {
  auto blas = cuda::Blas::Create(*allocator_);
  ASSERT_TRUE(blas.ok());
  cuda::DeviceBuffer buf = Poisoned(1 << 20);
  cuda::OutputProjectionArgs args;
  args.o = View(buf, DType::kBF16, {2, 8, 64});
  args.wo_a = View(buf, DType::kBF16, {3, 16, 170});
  args.wo_b = View(buf, DType::kBF16, {32, 48});
  args.mid = View(buf, DType::kBF16, {2, 3, 16});
  args.out = View(buf, DType::kBF16, {2, 32});
  EXPECT_EQ(cuda::GroupedOutputProjection(*blas, args, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
