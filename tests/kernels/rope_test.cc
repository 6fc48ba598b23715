// RoPE kernel vs cpu::RopeAtPositions: dtype x rows x widths x rope dims, forward and
// inverse, with a row whose position is out of the table (left unchanged).
#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cuda/ops/rope.h"
#include "gpu_test_util.h"

namespace peregrine::testing {
namespace {

class RopeTest : public GpuTest {
 protected:
  void Run(DType dtype, int64_t tokens, int64_t heads, int64_t n, int64_t rope_dim, bool inverse, uint32_t seed) {
    SCOPED_TRACE(std::string(DTypeName(dtype)) + " T=" + std::to_string(tokens) + " H=" + std::to_string(heads) +
                 " n=" + std::to_string(n) + " rope=" + std::to_string(rope_dim) + (inverse ? " inverse" : ""));
    std::mt19937 rng(seed);
    const int64_t num_positions = 300;
    std::vector<float> cos, sin;
    MakeRopeTables(num_positions, rope_dim, 10000.0, cos, sin);
    const int64_t rows = tokens * heads;
    std::vector<float> x = RandomNormal(rng, static_cast<size_t>(rows * n));
    if (dtype == DType::kBF16) x = RoundedBF16(x);
    std::vector<int32_t> positions(static_cast<size_t>(tokens));
    std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(num_positions - 1));
    for (int32_t& p : positions) p = pos(rng);
    if (tokens > 1) positions[1] = -1;  // outside the table: untouched

    std::vector<float> want = x;
    cpu::RopeAtPositions(want.data(), rows, n, rope_dim, positions.data(), heads, cos.data(), sin.data(),
                         num_positions, inverse);

    cuda::DeviceBuffer x_d = dtype == DType::kBF16 ? Upload(ToBF16(x)) : Upload(x);
    cuda::DeviceBuffer pos_d = Upload(positions);
    cuda::DeviceBuffer cos_d = Upload(cos);
    cuda::DeviceBuffer sin_d = Upload(sin);
    cuda::RopeArgs args;
    args.x = View(x_d, dtype, {rows, n});
    args.positions = View(pos_d, DType::kI32, {tokens});
    args.cos = View(cos_d, DType::kF32, {num_positions, rope_dim / 2});
    args.sin = View(sin_d, DType::kF32, {num_positions, rope_dim / 2});
    args.rope_dim = rope_dim;
    args.inverse = inverse;
    PG_ASSERT_OK(cuda::Rope(args, stream_.get()));
    const size_t count = static_cast<size_t>(rows * n);
    const std::vector<float> got = dtype == DType::kBF16 ? DownloadBF16(x_d, count) : Download<float>(x_d, count);
    EXPECT_TRUE(AllClose(got, want, ToleranceFor(dtype), "x"));
  }
};

TEST_F(RopeTest, DtypeShapeSweep) {
  uint32_t seed = 1;
  for (DType dtype : {DType::kF32, DType::kBF16})
    for (int64_t tokens : {1, 3, 17})
      for (int64_t heads : {1, 8, 64})
        for (auto [n, rope] : {std::pair<int64_t, int64_t>{64, 16}, {128, 64}, {512, 64}, {66, 2}})
          for (bool inverse : {false, true}) Run(dtype, tokens, heads, n, rope, inverse, seed++);
}

TEST_F(RopeTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::RopeArgs args;
  args.x = View(buf, DType::kF32, {6, 64});
  args.positions = View(buf, DType::kI32, {4});  // 6 rows are not a multiple of 4 tokens
  args.cos = View(buf, DType::kF32, {10, 8});
  args.sin = View(buf, DType::kF32, {10, 8});
  args.rope_dim = 16;
  EXPECT_EQ(cuda::Rope(args, stream_.get()).code(), StatusCode::kInvalidArgument);
  args.positions = View(buf, DType::kI32, {3});
  args.rope_dim = 18;  // table is for 16
  EXPECT_EQ(cuda::Rope(args, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
