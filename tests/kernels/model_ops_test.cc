// The small ops the CUDA model runner adds around the kernels: the cuBLAS projection
// (bf16 and f32, against cpu::Linear) and its grouped form (against one call per group), row copies (the window ring update), the
// deterministic random fills of synthetic weights, the overlapped step's token feed and
// flagged-row save, the CUDA-IPC transfer's page copy with its checksum (against the CPU
// reference, runtime/kv_page_checksum.h), and the load-time MXFP4 quantiser (against the
// host's QuantizeMxfp4).
#include <cmath>
#include <limits>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/ops/copy_rows.h"
#include "backend/cuda/ops/kv_copy.h"
#include "backend/cuda/ops/linear.h"
#include "backend/cuda/ops/quantize_mxfp4.h"
#include "backend/cuda/ops/random_fill.h"
#include "backend/cuda/ops/step_feed.h"
#include "gpu_test_util.h"
#include "kernels/bf16_gemv.cuh"
#include "model/dequant.h"
#include "runtime/kv_page_checksum.h"

namespace peregrine::testing {
namespace {

class ModelOpsTest : public GpuTest {};

TEST_F(ModelOpsTest, LinearMatchesCpu) {
  auto blas = cuda::Blas::Create(*allocator_);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  cpu::ThreadPool pool(2);
  std::mt19937 rng(7);
  for (const auto& [n, in, out] : {std::array<int64_t, 3>{1, 64, 24}, {3, 128, 512}, {17, 4096, 1024}, {130, 32, 8}}) {
    SCOPED_TRACE("N=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" + std::to_string(out));
    const std::vector<float> x = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n * in)));
    const std::vector<float> w = RoundedBF16(RandomNormal(rng, static_cast<size_t>(out * in), 1.0f / std::sqrt(in)));
    std::vector<float> want(static_cast<size_t>(n * out));
    cpu::Linear(pool, x.data(), w.data(), want.data(), n, in, out);
    // bf16 x bf16 -> f32 and -> bf16.
    cuda::DeviceBuffer x_d = Upload(ToBF16(x)), w_d = Upload(ToBF16(w));
    cuda::DeviceBuffer y32 = Poisoned(static_cast<size_t>(n * out) * 4), y16 = Poisoned(static_cast<size_t>(n * out) * 2);
    PG_ASSERT_OK(cuda::Linear(*blas, {View(x_d, DType::kBF16, {n, in}), View(w_d, DType::kBF16, {out, in}),
                                      View(y32, DType::kF32, {n, out})},
                              stream_.get()));
    PG_ASSERT_OK(cuda::Linear(*blas, {View(x_d, DType::kBF16, {n, in}), View(w_d, DType::kBF16, {out, in}),
                                      View(y16, DType::kBF16, {n, out})},
                              stream_.get()));
    Sync();
    EXPECT_TRUE(AllClose(Download<float>(y32, want.size()), want, ToleranceFor(DType::kF32), "linear f32 out"));
    EXPECT_TRUE(AllClose(DownloadBF16(y16, want.size()), want, ToleranceFor(DType::kBF16), "linear bf16 out"));
    // f32 throughout.
    cuda::DeviceBuffer xf = Upload(x), wf = Upload(w), yf = Poisoned(static_cast<size_t>(n * out) * 4);
    PG_ASSERT_OK(cuda::Linear(*blas, {View(xf, DType::kF32, {n, in}), View(wf, DType::kF32, {out, in}),
                                      View(yf, DType::kF32, {n, out})},
                              stream_.get()));
    Sync();
    EXPECT_TRUE(AllClose(Download<float>(yf, want.size()), want, ToleranceFor(DType::kF32), "linear f32"));
  }
  // Mixed x/w dtypes are refused.
  cuda::DeviceBuffer a = Poisoned(64 * 4), b = Poisoned(64 * 2), c = Poisoned(64 * 4);
  EXPECT_EQ(cuda::Linear(*blas, {View(a, DType::kF32, {1, 64}), View(b, DType::kBF16, {1, 64}), View(c, DType::kF32, {1, 1})},
                         stream_.get())
                .code(),
            StatusCode::kInvalidArgument);
}

// The grouped projection (a compressor's wkv and wgate in one launch) gives each group the bits
// of Linear on it: decode sizes (one launch), past them (one GEMM per group), batch-invariant.
TEST_F(ModelOpsTest, GroupedLinearMatchesLinearPerGroup) {
  auto blas = cuda::Blas::Create(*allocator_);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  std::mt19937 rng(11);
  for (bool invariant : {false, true})
    for (const auto& [n, in, out] : {std::array<int64_t, 3>{1, 4096, 1024}, {3, 4096, 256}, {4, 64, 24}, {9, 128, 64}})
      for (DType y_type : {DType::kF32, DType::kBF16}) {
        SCOPED_TRACE("N=" + std::to_string(n) + " in=" + std::to_string(in) + " out=" + std::to_string(out) +
                     (invariant ? " batch-invariant" : "") + " y " + std::string(DTypeName(y_type)));
        blas->set_batch_invariant(invariant);
        const int64_t groups = 2;
        const size_t y_size = static_cast<size_t>(groups * n * out) * (y_type == DType::kF32 ? 4 : 2);
        cuda::DeviceBuffer x_d = Upload(ToBF16(RandomNormal(rng, static_cast<size_t>(n * in))));
        cuda::DeviceBuffer w_d =
            Upload(ToBF16(RandomNormal(rng, static_cast<size_t>(groups * out * in), 1.0f / std::sqrt(in))));
        cuda::DeviceBuffer grouped = Poisoned(y_size), separate = Poisoned(y_size);
        const Tensor x = View(x_d, DType::kBF16, {n, in});
        PG_ASSERT_OK(cuda::GroupedLinear(*blas, {x, View(w_d, DType::kBF16, {groups, out, in}),
                                                 View(grouped, y_type, {groups, n, out})},
                                         stream_.get()));
        const size_t w_bytes = static_cast<size_t>(out * in) * 2, y_bytes = y_size / groups;
        for (int64_t g = 0; g < groups; ++g)
          PG_ASSERT_OK(cuda::Linear(
              *blas,
              {x, Tensor::Contiguous(static_cast<char*>(w_d.data()) + g * w_bytes, DType::kBF16, {out, in}, Device::kCuda),
               Tensor::Contiguous(static_cast<char*>(separate.data()) + g * y_bytes, y_type, {n, out}, Device::kCuda)},
              stream_.get()));
        Sync();
        if (invariant || n > kernels::kBf16GemvMaxTokens) {
          // The same kernel per group (batch-invariant), or the same GEMMs: the same bits.
          EXPECT_EQ(Download<uint8_t>(grouped, y_size), Download<uint8_t>(separate, y_size));
        } else {
          // One decode-sized launch for both groups may split each row over other warps than
          // one launch per group: the sums' order, not their terms, differs.
          const size_t count = static_cast<size_t>(groups * n * out);
          const auto got = y_type == DType::kF32 ? Download<float>(grouped, count) : DownloadBF16(grouped, count);
          const auto want = y_type == DType::kF32 ? Download<float>(separate, count) : DownloadBF16(separate, count);
          EXPECT_TRUE(AllClose(got, want, ToleranceFor(y_type), "grouped y"));
        }
      }
  blas->set_batch_invariant(false);
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  EXPECT_EQ(cuda::GroupedLinear(*blas, {View(buf, DType::kBF16, {1, 64}), View(buf, DType::kBF16, {2, 8, 64}),
                                        View(buf, DType::kF32, {2, 1, 9})},
                                stream_.get())
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cuda::GroupedLinear(*blas, {View(buf, DType::kF32, {1, 64}), View(buf, DType::kF32, {2, 8, 64}),
                                        View(buf, DType::kF32, {2, 1, 8})},
                                stream_.get())
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ModelOpsTest, CopyRowsScattersAndSkips) {
  const int64_t rows = 40, width = 24;  // 48-byte bf16 rows
  std::vector<uint16_t> src(static_cast<size_t>(rows * width));
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint16_t>(i);
  std::vector<uint16_t> dst(src.size(), 0xffff);
  const std::vector<int32_t> from = {3, -1, 39, 0, 7, 100};
  const std::vector<int32_t> to = {10, 5, 0, -1, 39, 1};
  cuda::DeviceBuffer s = Upload(src), d = Upload(dst), f = Upload(from), t = Upload(to);
  PG_ASSERT_OK(cuda::CopyRows({View(s, DType::kBF16, {rows, width}), View(d, DType::kBF16, {rows, width}),
                               View(f, DType::kI32, {6}), View(t, DType::kI32, {6})},
                              stream_.get()));
  Sync();
  const std::vector<uint16_t> got = Download<uint16_t>(d, dst.size());
  for (int64_t r = 0; r < rows; ++r) {
    int64_t expect_src = -1;
    if (r == 10) expect_src = 3;
    if (r == 0) expect_src = 39;
    if (r == 39) expect_src = 7;
    for (int64_t c = 0; c < width; ++c) {
      const uint16_t want = expect_src < 0 ? uint16_t{0xffff} : static_cast<uint16_t>(expect_src * width + c);
      ASSERT_EQ(got[static_cast<size_t>(r * width + c)], want) << "row " << r << " col " << c;
    }
  }
  // Rows that are not a multiple of 16 bytes are refused.
  EXPECT_EQ(cuda::CopyRows({View(s, DType::kBF16, {rows, 4}), View(d, DType::kBF16, {rows, 4}),
                            View(f, DType::kI32, {6}), View(t, DType::kI32, {6})},
                           stream_.get())
                .code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ModelOpsTest, RandomFillIsDeterministicAndInRange) {
  const int64_t n = (1 << 20) + 3;
  cuda::DeviceBuffer a = Poisoned(static_cast<size_t>(n) * 2), b = Poisoned(static_cast<size_t>(n) * 2);
  PG_ASSERT_OK(cuda::RandomUniform(View(a, DType::kBF16, {n}), 42, -0.5f, 0.5f, stream_.get()));
  PG_ASSERT_OK(cuda::RandomUniform(View(b, DType::kBF16, {n}), 42, -0.5f, 0.5f, stream_.get()));
  Sync();
  const std::vector<float> va = DownloadBF16(a, static_cast<size_t>(n)), vb = DownloadBF16(b, static_cast<size_t>(n));
  ASSERT_EQ(va, vb);
  double sum = 0.0, sq = 0.0;
  for (float v : va) {
    ASSERT_GE(v, -0.5f);
    ASSERT_LE(v, 0.5f);
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  EXPECT_NEAR(sum / static_cast<double>(n), 0.0, 2e-3);
  EXPECT_NEAR(sq / static_cast<double>(n), 1.0 / 12.0, 2e-3);  // uniform on [-1/2, 1/2)
  cuda::DeviceBuffer bytes = Poisoned(1000);
  PG_ASSERT_OK(cuda::RandomBytes(View(bytes, DType::kU8, {1000}), 1, 118, 120, stream_.get()));
  Sync();
  int seen[3] = {0, 0, 0};
  for (uint8_t v : Download<uint8_t>(bytes, 1000)) {
    ASSERT_GE(v, 118);
    ASSERT_LE(v, 120);
    ++seen[v - 118];
  }
  EXPECT_GT(seen[0], 250);
  EXPECT_GT(seen[1], 250);
  EXPECT_GT(seen[2], 250);
}


TEST_F(ModelOpsTest, FeedTokensWritesThePreviousStepsSamples) {
  std::vector<int32_t> ids = {11, 12, 13, 14, 15, 16, 17, 18};
  const std::vector<int32_t> sampled = {100, -1, 102, 103};
  // (row, index): rows 1, 4, 7 fed; index 1 has no token (fed 0); out-of-range pairs skipped.
  const std::vector<int32_t> feeds = {1, 0, 4, 1, 7, 3, 9, 2, 2, 7};
  cuda::DeviceBuffer ids_d = Upload(ids), sampled_d = Upload(sampled), feeds_d = Upload(feeds);
  cuda::FeedTokensArgs a;
  a.token_ids = View(ids_d, DType::kI32, {8});
  a.feeds = View(feeds_d, DType::kI32, {5, 2});
  a.sampled = View(sampled_d, DType::kI32, {4});
  PG_ASSERT_OK(cuda::FeedTokens(a, stream_.get()));
  Sync();
  EXPECT_EQ(Download<int32_t>(ids_d, 8), (std::vector<int32_t>{11, 100, 13, 14, 0, 16, 17, 103}));
  // No feeds: nothing to do; a bad shape is refused.
  a.feeds = Tensor();
  PG_ASSERT_OK(cuda::FeedTokens(a, stream_.get()));
  a.feeds = View(feeds_d, DType::kI32, {2, 5});
  EXPECT_EQ(cuda::FeedTokens(a, stream_.get()).code(), StatusCode::kInvalidArgument);
}

TEST_F(ModelOpsTest, CopyFlaggedRowsCopiesOnlyFlaggedRows) {
  const int64_t rows = 5, width = 20000;  // wider than one CTA's chunk
  std::mt19937 rng(3);
  const std::vector<float> src = RandomNormal(rng, static_cast<size_t>(rows * width));
  const std::vector<float> before = RandomNormal(rng, static_cast<size_t>(rows * width));
  const std::vector<int32_t> flags = {0, 1, 0, 0, 1};
  cuda::DeviceBuffer src_d = Upload(src), dst_d = Upload(before), flags_d = Upload(flags);
  cuda::CopyFlaggedRowsArgs a;
  a.src = View(src_d, DType::kF32, {rows, width});
  a.dst = View(dst_d, DType::kF32, {rows, width});
  a.flags = View(flags_d, DType::kI32, {rows});
  PG_ASSERT_OK(cuda::CopyFlaggedRows(a, stream_.get()));
  Sync();
  const std::vector<float> got = Download<float>(dst_d, src.size());
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float>& want = flags[static_cast<size_t>(r)] ? src : before;
    for (int64_t c = 0; c < width; ++c) {
      const size_t i = static_cast<size_t>(r * width + c);
      ASSERT_EQ(got[i], want[i]) << "row " << r << " column " << c;
    }
  }
}

TEST_F(ModelOpsTest, KvCopyGathersPagesAndChecksumsThemAsTheCpuDoes) {
  // Three pages gathered from five regions of a source buffer (one region longer than a
  // kernel segment, so it is split), plus one page only checksummed (no destination).
  std::mt19937 rng(11);
  const size_t src_bytes = 3u << 20;
  std::vector<uint8_t> src(src_bytes);
  for (uint8_t& b : src) b = static_cast<uint8_t>(rng());
  struct Region {
    size_t at, bytes, page;
  };
  const std::vector<Region> regions = {{0, 4096, 0}, {8192, 1u << 20, 0}, {2u << 20, 8, 1}, {100000, 65536 + 8, 1},
                                       {(2u << 20) + 4096, 40000, 2}};
  cuda::DeviceBuffer s = Upload(src), d = Poisoned(src_bytes), sums = Poisoned(4 * 8);
  std::vector<std::vector<uint8_t>> pages(4);
  std::vector<cuda::KvCopyRange> ranges;
  size_t out = 0;
  for (const Region& r : regions) {
    std::vector<uint8_t>& page = pages[r.page];
    ranges.push_back({s.as<uint8_t>() + r.at, d.as<uint8_t>() + out, r.bytes, page.size(), r.page});
    page.insert(page.end(), src.begin() + static_cast<std::ptrdiff_t>(r.at),
                src.begin() + static_cast<std::ptrdiff_t>(r.at + r.bytes));
    out += r.bytes;
  }
  pages[3].assign(src.begin(), src.begin() + 256);
  ranges.push_back({s.as<uint8_t>(), nullptr, 256, 0, 3});
  std::vector<kernels::KvCopySegment> segments;
  PG_ASSERT_OK(cuda::PlanKvCopy(ranges, &segments));
  EXPECT_GT(segments.size(), ranges.size());  // the long region was split
  cuda::DeviceBuffer seg = Upload(segments);
  PG_ASSERT_OK(cuda::KvCopy(seg.as<const kernels::KvCopySegment>(), static_cast<int64_t>(segments.size()),
                            sums.as<uint64_t>(), 4, stream_.get()));
  Sync();
  const std::vector<uint64_t> got = Download<uint64_t>(sums, 4);
  for (size_t p = 0; p < 4; ++p) EXPECT_EQ(got[p], KvPageChecksum(pages[p])) << "page " << p;
  const std::vector<uint8_t> copied = Download<uint8_t>(d, out);
  std::vector<uint8_t> want;
  for (size_t p = 0; p < 3; ++p) want.insert(want.end(), pages[p].begin(), pages[p].end());
  EXPECT_TRUE(copied == want);
  // Pieces that are not whole aligned words are refused before anything runs.
  segments.clear();
  const cuda::KvCopyRange odd = {s.as<uint8_t>(), d.as<uint8_t>(), 12, 0, 0};
  EXPECT_EQ(cuda::PlanKvCopy({&odd, 1}, &segments).code(), StatusCode::kInvalidArgument);
  const cuda::KvCopyRange misaligned = {s.as<uint8_t>() + 4, d.as<uint8_t>(), 16, 0, 0};
  EXPECT_EQ(cuda::PlanKvCopy({&misaligned, 1}, &segments).code(), StatusCode::kInvalidArgument);
}

TEST_F(ModelOpsTest, QuantizeMxfp4MatchesTheHostBitForBit) {
  // Random rows at several scales, plus groups that hit the rule's edges: all zeros (the
  // 1e-4 floor), amax exactly 6 * 2^k (a power-of-two ratio), values on e2m1 midpoints
  // (ties to the even code), negative zeros, a NaN and an infinity.
  const int64_t rows = 67, cols = 320;
  std::mt19937 rng(5);
  std::vector<float> w = RandomNormal(rng, static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) w[static_cast<size_t>(r * cols + c)] *= std::ldexp(1.0f, static_cast<int>(r % 40) - 20);
  auto group = [&](int64_t r, int64_t g) { return w.data() + r * cols + g * 32; };
  std::fill(group(0, 0), group(0, 0) + 32, 0.0f);
  std::fill(group(1, 1), group(1, 1) + 32, -0.0f);
  for (int i = 0; i < 32; ++i) group(2, 0)[i] = 0.25f * static_cast<float>(i % 25);  // amax 6
  group(3, 2)[0] = 6.0f * 0.125f;
  const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
  for (int i = 0; i < 32; ++i) group(4, 3)[i] = (i % 2 == 0 ? 1.0f : -1.0f) * ties[i % 8];
  group(5, 4)[7] = std::nanf("");
  group(6, 5)[3] = -std::numeric_limits<float>::infinity();
  const std::vector<uint16_t> bf = ToBF16(w);
  std::vector<float> exact(bf.size());
  for (size_t i = 0; i < bf.size(); ++i) exact[i] = BF16ToF32(bf[i]);
  std::vector<uint8_t> want_codes(static_cast<size_t>(rows * cols / 2)), want_scales(static_cast<size_t>(rows * cols / 32));
  QuantizeMxfp4(exact.data(), rows, cols, want_codes.data(), want_scales.data());
  cuda::DeviceBuffer w_d = Upload(bf), codes = Poisoned(want_codes.size()), scales = Poisoned(want_scales.size());
  PG_ASSERT_OK(cuda::QuantizeMxfp4({View(w_d, DType::kBF16, {rows, cols}), View(codes, DType::kU8, {rows, cols / 2}),
                                    View(scales, DType::kU8, {rows, cols / 32})},
                                   stream_.get()));
  Sync();
  EXPECT_EQ(Download<uint8_t>(scales, want_scales.size()), want_scales);
  EXPECT_EQ(Download<uint8_t>(codes, want_codes.size()), want_codes);
  EXPECT_EQ(cuda::QuantizeMxfp4({View(w_d, DType::kBF16, {rows, 40}), View(codes, DType::kU8, {rows, 20}),
                                 View(scales, DType::kU8, {rows, 1})},
                                stream_.get())
                .code(),
            StatusCode::kInvalidArgument);  // not a multiple of 32 columns
}

}  // namespace
}  // namespace peregrine::testing
