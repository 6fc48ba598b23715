// Token embedding into the mHC streams (out-of-range ids write zeros) and the clamped
// SwiGLU (values beyond the limit, limit off, vector and scalar widths) vs the CPU formulas.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/ops/embedding.h"
#include "backend/cuda/ops/swiglu.h"
#include "gpu_test_util.h"

namespace peregrine::testing {
namespace {

class EmbeddingTest : public GpuTest {
 protected:
  void Run(int64_t vocab, int64_t hc, int64_t d, const std::vector<int32_t>& ids, uint32_t seed) {
    SCOPED_TRACE("V=" + std::to_string(vocab) + " hc=" + std::to_string(hc) + " D=" + std::to_string(d) +
                 " N=" + std::to_string(ids.size()));
    std::mt19937 rng(seed);
    const int64_t n = static_cast<int64_t>(ids.size());
    const std::vector<float> table = RoundedBF16(RandomNormal(rng, static_cast<size_t>(vocab * d)));
    std::vector<float> want(static_cast<size_t>(n * hc * d), 0.0f);
    for (int64_t t = 0; t < n; ++t) {
      const int32_t id = ids[static_cast<size_t>(t)];
      if (id < 0 || id >= vocab) continue;
      for (int64_t i = 0; i < hc; ++i)
        std::copy_n(table.begin() + id * d, d, want.begin() + (t * hc + i) * d);
    }
    cuda::DeviceBuffer ids_d = Upload(ids), table_d = Upload(ToBF16(table));
    cuda::DeviceBuffer streams_d = Poisoned(want.size() * 4);
    cuda::EmbeddingArgs a;
    a.token_ids = View(ids_d, DType::kI32, {n});
    a.table = View(table_d, DType::kBF16, {vocab, d});
    a.streams = View(streams_d, DType::kF32, {n, hc, d});
    PG_ASSERT_OK(cuda::EmbeddingLookup(a, stream_.get()));
    EXPECT_TRUE(AllClose(Download<float>(streams_d, want.size()), want, {0.0, 0.0}, "streams"));
  }
};

TEST_F(EmbeddingTest, CopiesRowIntoEveryStream) {
  uint32_t seed = 1;
  for (int64_t hc : {1, 2, 3, 4})
    for (int64_t d : {8, 64, 4096}) {
      Run(50, hc, d, {7}, seed++);
      Run(50, hc, d, {0, 49, 3, 3, 17, 25, 1, 2, 48, 11, 12, 13, 14, 15, 16, 18, 19}, seed++);
    }
  std::vector<int32_t> many(130);
  for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>((i * 37) % 1000);
  Run(1000, 4, 4096, many, seed++);
}

TEST_F(EmbeddingTest, OutOfRangeIdsWriteZeros) {
  Run(50, 4, 64, {-1, 50, 0, 1 << 30, -(1 << 30), 49, 51}, 100);
  Run(50, 2, 4096, {50}, 101);
}

TEST_F(EmbeddingTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::EmbeddingArgs a;
  a.token_ids = View(buf, DType::kI64, {4});
  a.table = View(buf, DType::kBF16, {10, 64});
  a.streams = View(buf, DType::kF32, {4, 2, 64});
  EXPECT_EQ(cuda::EmbeddingLookup(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a.token_ids = View(buf, DType::kI32, {4});
  a.streams = View(buf, DType::kF32, {4, 2, 32});
  EXPECT_EQ(cuda::EmbeddingLookup(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a.table = View(buf, DType::kBF16, {10, 60});
  a.streams = View(buf, DType::kF32, {4, 2, 60});
  EXPECT_EQ(cuda::EmbeddingLookup(a, stream_.get()).code(), StatusCode::kInvalidArgument);
}

class SwigluTest : public GpuTest {
 protected:
  void Run(int64_t n, int64_t inter, float limit, uint32_t seed) {
    SCOPED_TRACE("N=" + std::to_string(n) + " I=" + std::to_string(inter) + " limit=" + std::to_string(limit));
    std::mt19937 rng(seed);
    // stddev 8: a good share of the gates and ups lie beyond a limit of 7.
    const std::vector<float> gate_up = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n * 2 * inter), 8.0f));
    std::vector<float> want(static_cast<size_t>(n * inter));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < inter; ++i) {
        float g = gate_up[static_cast<size_t>(t * 2 * inter + i)];
        float u = gate_up[static_cast<size_t>(t * 2 * inter + inter + i)];
        if (limit > 0.0f) {
          g = std::fmin(g, limit);
          u = std::clamp(u, -limit, limit);
        }
        want[static_cast<size_t>(t * inter + i)] = cpu::Silu(g) * u;
      }
    cuda::DeviceBuffer in_d = Upload(ToBF16(gate_up)), h_d = Poisoned(want.size() * 2);
    cuda::SwigluArgs a;
    a.gate_up = View(in_d, DType::kBF16, {n, 2 * inter});
    a.h = View(h_d, DType::kBF16, {n, inter});
    a.limit = limit;
    PG_ASSERT_OK(cuda::SwigluClamp(a, stream_.get()));
    EXPECT_TRUE(AllClose(DownloadBF16(h_d, want.size()), want, ToleranceFor(DType::kBF16), "h"));
  }
};

TEST_F(SwigluTest, ClampsBeyondTheLimit) {
  uint32_t seed = 1;
  for (float limit : {7.0f, 0.0f, -1.0f})
    for (int64_t n : {1, 3, 17, 130})
      for (int64_t inter : {8, 24, 2048, 3, 13}) Run(n, inter, limit, seed++);
}

TEST_F(SwigluTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::SwigluArgs a;
  a.gate_up = View(buf, DType::kBF16, {4, 64});
  a.h = View(buf, DType::kBF16, {4, 64});
  EXPECT_EQ(cuda::SwigluClamp(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a.gate_up = View(buf, DType::kBF16, {4, 63});
  a.h = View(buf, DType::kBF16, {4, 31});
  EXPECT_EQ(cuda::SwigluClamp(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a.gate_up = View(buf, DType::kF32, {4, 64});
  a.h = View(buf, DType::kBF16, {4, 32});
  EXPECT_EQ(cuda::SwigluClamp(a, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
