// RMSNorm kernel vs cpu::RmsNorm over dtype x shape (awkward widths, warp and block rows),
// weighted and unweighted, in place; with RoPE fused against the norm then Rope.
#include <cuda_runtime_api.h>

#include <cmath>
#include <tuple>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/ops/rms_norm.h"
#include "backend/cuda/ops/rope.h"
#include "gpu_test_util.h"
#include "kernels/common/kv_fp8_row.h"

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

// The norm with RoPE fused (the model's per-head q norm and its kv norm) gives the bits of
// RmsNorm followed by Rope: one and several rows per position, warp and block rows, positions
// off the table (left unrotated), f32 and bf16 out, in place.
TEST_F(RmsNormTest, FusedRopeMatchesNormThenRope) {
  struct Case {
    DType in, out;
    int64_t tokens, heads, n, rope_dim;
    bool weighted, in_place;
  };
  uint32_t seed = 500;
  for (const Case& c : {Case{DType::kF32, DType::kBF16, 3, 64, 512, 64, false, false},
                        Case{DType::kF32, DType::kBF16, 5, 1, 512, 64, true, false},
                        Case{DType::kBF16, DType::kBF16, 2, 4, 2048, 64, true, true},
                        Case{DType::kF32, DType::kF32, 7, 3, 40, 16, false, false},
                        Case{DType::kF32, DType::kBF16, 1, 1, 64, 64, true, false}}) {
    SCOPED_TRACE("tokens=" + std::to_string(c.tokens) + " heads=" + std::to_string(c.heads) + " n=" +
                 std::to_string(c.n) + " rope=" + std::to_string(c.rope_dim));
    std::mt19937 rng(seed++);
    const int64_t rows = c.tokens * c.heads, num_positions = 9;
    const size_t count = static_cast<size_t>(rows * c.n);
    std::vector<float> x = RandomNormal(rng, count, 2.0f);
    if (c.in == DType::kBF16) x = RoundedBF16(x);
    const std::vector<float> w = RandomUniform(rng, static_cast<size_t>(c.n), 0.5f, 1.5f);
    const std::vector<float> angles = RandomUniform(rng, static_cast<size_t>(num_positions * c.rope_dim / 2), -3.0f, 3.0f);
    std::vector<float> cos_table(angles.size()), sin_table(angles.size());
    for (size_t i = 0; i < angles.size(); ++i) cos_table[i] = std::cos(angles[i]), sin_table[i] = std::sin(angles[i]);
    std::vector<int32_t> positions(static_cast<size_t>(c.tokens));
    for (size_t t = 0; t < positions.size(); ++t) positions[t] = t % 4 == 2 ? -1 : static_cast<int32_t>((3 * t + 1) % 11);
    cuda::DeviceBuffer w_d = Upload(w), cos_d = Upload(cos_table), sin_d = Upload(sin_table), pos_d = Upload(positions);
    const size_t out_bytes = count * (c.out == DType::kBF16 ? 2 : 4);
    auto run = [&](bool fused, bool fp8) {
      cuda::DeviceBuffer x_d = c.in == DType::kBF16 ? Upload(ToBF16(x)) : Upload(x);
      cuda::DeviceBuffer y_d = c.in_place ? cuda::DeviceBuffer{} : Poisoned(out_bytes);
      cuda::RmsNormArgs args;
      args.x = View(x_d, c.in, {rows, c.n});
      args.weight = c.weighted ? View(w_d, DType::kF32, {c.n}) : Tensor{};
      args.y = c.in_place ? args.x : View(y_d, c.out, {rows, c.n});
      if (fp8) args.fp8_nope = c.n - c.rope_dim;
      cuda::RopeArgs rope;
      rope.x = args.y;
      rope.positions = View(pos_d, DType::kI32, {c.tokens});
      rope.cos = View(cos_d, DType::kF32, {num_positions, c.rope_dim / 2});
      rope.sin = View(sin_d, DType::kF32, {num_positions, c.rope_dim / 2});
      rope.rope_dim = c.rope_dim;
      if (fused) {
        args.rope_positions = rope.positions;
        args.rope_cos = rope.cos;
        args.rope_sin = rope.sin;
        args.rope_dim = c.rope_dim;
      }
      EXPECT_TRUE(cuda::RmsNorm(args, stream_.get()).ok());
      if (!fused) {
        EXPECT_TRUE(cuda::Rope(rope, stream_.get()).ok());
      }
      const cuda::DeviceBuffer& result = c.in_place ? x_d : y_d;
      return Download<uint8_t>(result, c.in_place ? count * (c.in == DType::kBF16 ? 2 : 4) : out_bytes);
    };
    for (bool fp8 : {false, true}) {
      const std::vector<uint8_t> separate = run(false, fp8);
      EXPECT_EQ(run(true, fp8), separate) << (fp8 ? "with the FP8 round trip" : "");
    }
  }
}

// The FP8 round trip of a KV row's e4m3 part (--kv-cache-dtype fp8) against the reference norm
// through the host format, over warp rows, block rows, a partial last pass and a partial last
// block. The device's f32 norm differs from the reference's in its last bits, so a value may
// land one e4m3 step away where the reference sits on a rounding boundary; nearly all values
// must be identical, and the values past fp8_nope untouched.
TEST_F(RmsNormTest, Fp8RoundTripIsTheFormatsRounding) {
  uint32_t seed = 900;
  for (auto [rows, n, nope] : {std::tuple<int64_t, int64_t, int64_t>{5, 512, 448}, {3, 64, 48}, {2, 2048, 1984},
                               {3, 576, 512}, {4, 40, 24}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " n=" + std::to_string(n) + " nope=" + std::to_string(nope));
    std::mt19937 rng(seed++);
    const size_t count = static_cast<size_t>(rows * n);
    const std::vector<float> x = RandomNormal(rng, count, 2.0f);
    const std::vector<float> w = RandomUniform(rng, static_cast<size_t>(n), 0.5f, 1.5f);
    std::vector<float> want(count);
    cpu::RmsNorm(x.data(), w.data(), want.data(), rows, n, 1e-6f);
    const kernels::KvFp8RowLayout layout{static_cast<int>(nope), 0};
    std::vector<uint8_t> stored(static_cast<size_t>(layout.row_bytes()));
    for (int64_t r = 0; r < rows; ++r) {
      kernels::KvFp8EncodeRow(want.data() + r * n, layout, stored.data());
      kernels::KvFp8DecodeRow(stored.data(), layout, want.data() + r * n);
    }
    cuda::DeviceBuffer x_d = Upload(x), w_d = Upload(w), y_d = Poisoned(count * 4);
    cuda::RmsNormArgs args;
    args.x = View(x_d, DType::kF32, {rows, n});
    args.weight = View(w_d, DType::kF32, {n});
    args.y = View(y_d, DType::kF32, {rows, n});
    args.fp8_nope = nope;
    PG_ASSERT_OK(cuda::RmsNorm(args, stream_.get()));
    const std::vector<float> got = Download<float>(y_d, count);
    // (The values past fp8_nope are the plain norm's, equal only within its f32 rounding.)
    size_t identical = 0, rounded = 0;
    for (size_t i = 0; i < count; ++i) {
      const bool e4m3 = static_cast<int64_t>(i) % n < nope;
      rounded += e4m3 ? 1 : 0;
      if (got[i] == want[i]) {
        identical += e4m3 ? 1 : 0;
        continue;
      }
      const float tolerance = e4m3 ? std::max(std::fabs(want[i]) * 0.14f, 1e-3f) : std::fabs(want[i]) * 1e-5f;
      ASSERT_LE(std::fabs(got[i] - want[i]), tolerance) << "value " << i;
    }
    EXPECT_GE(static_cast<double>(identical), 0.97 * static_cast<double>(rounded));
  }
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
  // Fused RoPE: rope_dim a multiple of 8 within N, tables [positions, rope_dim / 2], R a
  // multiple of T.
  args.x = View(buf, DType::kF32, {4, 64});
  args.y = args.x;
  args.rope_positions = View(buf, DType::kI32, {2});
  args.rope_cos = View(buf, DType::kF32, {3, 8});
  args.rope_sin = View(buf, DType::kF32, {3, 8});
  args.rope_dim = 16;
  EXPECT_TRUE(cuda::RmsNorm(args, stream_.get()).ok());
  Sync();
  cuda::RmsNormArgs bad = args;
  bad.rope_dim = 12;
  EXPECT_EQ(cuda::RmsNorm(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.rope_cos = View(buf, DType::kF32, {3, 4});
  EXPECT_EQ(cuda::RmsNorm(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.rope_positions = View(buf, DType::kI32, {3});
  EXPECT_EQ(cuda::RmsNorm(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = args;
  bad.rope_dim = 72;
  EXPECT_EQ(cuda::RmsNorm(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  // The FP8 round trip: a multiple of 8 within N.
  bad = args;
  bad.fp8_nope = 48;
  EXPECT_TRUE(cuda::RmsNorm(bad, stream_.get()).ok());
  Sync();
  bad.fp8_nope = 44;
  EXPECT_EQ(cuda::RmsNorm(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad.fp8_nope = 72;
  EXPECT_EQ(cuda::RmsNorm(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
