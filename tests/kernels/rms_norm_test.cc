// RMSNorm kernel vs cpu::RmsNorm over dtype x shape (awkward widths, warp and block rows),
// weighted and unweighted, in place.
#include <cuda_runtime_api.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/ops/rms_norm.h"
#include "gpu_test_util.h"

namespace peregrine::testing {
namespace {

struct RmsNormCase {
  DType in;
  DType out;
  int64_t rows;
  int64_t n;
  bool weighted;
  bool in_place;
};

std::string Name(const RmsNormCase& c) {
  return std::string(DTypeName(c.in)) + "->" + std::string(DTypeName(c.out)) + " rows=" + std::to_string(c.rows) +
         " n=" + std::to_string(c.n) + (c.weighted ? " weighted" : " unweighted") + (c.in_place ? " in-place" : "");
}

class RmsNormTest : public GpuTest {
 protected:
  void Run(const RmsNormCase& c, uint32_t seed) {
    SCOPED_TRACE(Name(c));
    std::mt19937 rng(seed);
    const size_t count = static_cast<size_t>(c.rows * c.n);
    std::vector<float> x = RandomNormal(rng, count, 2.0f);
    if (c.in == DType::kBF16) x = RoundedBF16(x);
    std::vector<float> w = RandomUniform(rng, static_cast<size_t>(c.n), 0.5f, 1.5f);
    std::vector<float> want(count);
    cpu::RmsNorm(x.data(), c.weighted ? w.data() : nullptr, want.data(), c.rows, c.n, 1e-6f);

    const size_t in_bytes = count * (c.in == DType::kBF16 ? 2 : 4);
    const size_t out_bytes = count * (c.out == DType::kBF16 ? 2 : 4);
    cuda::DeviceBuffer x_d = c.in == DType::kBF16 ? Upload(ToBF16(x)) : Upload(x);
    cuda::DeviceBuffer w_d = Upload(w);
    cuda::DeviceBuffer y_d = c.in_place ? cuda::DeviceBuffer{} : Poisoned(out_bytes);
    (void)in_bytes;
    cuda::RmsNormArgs args;
    args.x = View(x_d, c.in, {c.rows, c.n});
    args.weight = c.weighted ? View(w_d, DType::kF32, {c.n}) : Tensor{};
    args.y = c.in_place ? args.x : View(y_d, c.out, {c.rows, c.n});
    PG_ASSERT_OK(cuda::RmsNorm(args, stream_.get()));
    const cuda::DeviceBuffer& result = c.in_place ? x_d : y_d;
    const std::vector<float> got =
        c.out == DType::kBF16 ? DownloadBF16(result, count) : Download<float>(result, count);
    EXPECT_TRUE(AllClose(got, want, ToleranceFor(c.out), "y"));
  }
};

TEST_F(RmsNormTest, DtypeShapeSweep) {
  uint32_t seed = 1;
  for (DType in : {DType::kF32, DType::kBF16})
    for (DType out : {DType::kF32, DType::kBF16})
      for (int64_t n : {1, 3, 64, 129, 512, 1024, 1032, 4096})
        for (int64_t rows : {1, 3, 17, 192})
          for (bool weighted : {true, false}) Run({in, out, rows, n, weighted, false}, seed++);
}

TEST_F(RmsNormTest, PerHeadInPlace) {
  // The per-head q norm: [B * 64 heads, 512] rows, unweighted, in place.
  Run({DType::kBF16, DType::kBF16, 3 * 64, 512, false, true}, 101);
  Run({DType::kF32, DType::kF32, 17 * 64, 512, false, true}, 102);
  Run({DType::kF32, DType::kF32, 5, 4096, true, true}, 103);
}

TEST_F(RmsNormTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(4096);
  cuda::RmsNormArgs args;
  args.x = View(buf, DType::kF32, {4, 64});
  args.y = View(buf, DType::kF32, {4, 32});
  EXPECT_EQ(cuda::RmsNorm(args, stream_.get()).code(), StatusCode::kInvalidArgument);
  args.y = View(buf, DType::kBF16, {4, 64});  // aliasing with another dtype
  EXPECT_EQ(cuda::RmsNorm(args, stream_.get()).code(), StatusCode::kInvalidArgument);
  args.y = View(buf, DType::kI32, {4, 64});
  EXPECT_EQ(cuda::RmsNorm(args, stream_.get()).code(), StatusCode::kInvalidArgument);
  args.y = args.x;
  args.x.device = Device::kCpu;
  EXPECT_EQ(cuda::RmsNorm(args, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
