// mHC kernels vs the CPU model functions (HyperConnectionPre/Post/Head + cpu::RmsNorm) with
// random weights over N x hc x D x Sinkhorn iterations; head over a row subset; a captured
// pre -> post -> head chain replayed on rewritten streams; the expansion with the MoE combine
// fused against the two launches; the lane mean (StreamMean); argument checks.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/ops/hyper_connection.h"
#include "backend/cuda/ops/moe.h"
#include "backend/cuda/stream.h"
#include "gpu_test_util.h"
#include "model/deepseek_v4/layers.h"

namespace peregrine::testing {
namespace {

// post/comb (f32) come from dot products of length hc*D summed in another order than the
// CPU's, then sigmoid / softmax / Sinkhorn: a few ulp of the mixes, not one rounding.
constexpr Tolerance kMixTolerance = {2e-5, 2e-4};

struct HcCase {
  int64_t n;
  int64_t hc;
  int64_t d;
  int64_t iters;
};

std::string Name(const HcCase& c) {
  return "N=" + std::to_string(c.n) + " hc=" + std::to_string(c.hc) + " D=" + std::to_string(c.d) +
         " iters=" + std::to_string(c.iters);
}

HostTensor Host(std::vector<float>& v, Shape shape) {
  HostTensor t;
  t.view = Tensor::Contiguous(v.data(), DType::kF32, shape);
  return t;
}

// Random mHC weights shaped as the checkpoint's: fn [M, hc*D], base [M], scale [3] or [1].
struct HcWeights {
  std::vector<float> fn, base, scale, norm;
  deepseek_v4::HyperConnectionWeights View(int64_t m, int64_t k) {
    return {Host(fn, {m, k}), Host(base, {m}), Host(scale, {static_cast<int64_t>(scale.size())})};
  }
};

HcWeights RandomWeights(std::mt19937& rng, int64_t m, int64_t k, int64_t d, int64_t num_scales) {
  HcWeights w;
  // Mixes of a normalised row come out with stddev ~2: sigmoids and softmaxes away from flat.
  w.fn = RandomNormal(rng, static_cast<size_t>(m * k), 2.0f / std::sqrt(static_cast<float>(k)));
  w.base = RandomNormal(rng, static_cast<size_t>(m), 0.5f);
  w.scale = RandomUniform(rng, static_cast<size_t>(num_scales), 0.5f, 1.5f);
  w.norm = RandomUniform(rng, static_cast<size_t>(d), 0.5f, 1.5f);
  return w;
}

// Streams with a different scale per stream so the pre weights matter.
std::vector<float> RandomStreams(std::mt19937& rng, int64_t n, int64_t hc, int64_t d) {
  std::vector<float> s = RandomNormal(rng, static_cast<size_t>(n * hc * d));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < hc; ++i)
      for (int64_t e = 0; e < d; ++e) s[static_cast<size_t>((t * hc + i) * d + e)] *= 0.5f + static_cast<float>(i);
  return s;
}

ModelConfig Config(const HcCase& c) {
  ModelConfig config;
  config.hc_mult = c.hc;
  config.hidden_size = c.d;
  config.hc_sinkhorn_iters = c.iters;
  config.hc_eps = 1e-6;
  config.rms_norm_eps = 1e-6;
  return config;
}

class HyperConnectionTest : public GpuTest {
 protected:
  void RunPre(const HcCase& c, uint32_t seed) {
    SCOPED_TRACE(Name(c));
    std::mt19937 rng(seed);
    const int64_t m = (2 + c.hc) * c.hc, k = c.hc * c.d;
    HcWeights w = RandomWeights(rng, m, k, c.d, 3);
    std::vector<float> streams = RandomStreams(rng, c.n, c.hc, c.d);
    const ModelConfig config = Config(c);
    std::vector<float> x(static_cast<size_t>(c.n * c.d)), post(static_cast<size_t>(c.n * c.hc)),
        comb(static_cast<size_t>(c.n * c.hc * c.hc));
    deepseek_v4::HyperConnectionPre(config, w.View(m, k), streams.data(), c.n, x.data(), post.data(), comb.data());
    cpu::RmsNorm(x.data(), w.norm.data(), x.data(), c.n, c.d, 1e-6f);

    cuda::DeviceBuffer streams_d = Upload(streams), fn_d = Upload(w.fn), base_d = Upload(w.base);
    cuda::DeviceBuffer scale_d = Upload(w.scale), norm_d = Upload(w.norm);
    const int64_t ws = cuda::HyperConnectionWorkspaceFloats(c.n, c.hc, c.d, m);
    cuda::DeviceBuffer ws_d = Poisoned(static_cast<size_t>(ws) * 4), x_d = Poisoned(x.size() * 2);
    cuda::DeviceBuffer post_d = Poisoned(post.size() * 4), comb_d = Poisoned(comb.size() * 4);
    cuda::HcPreArgs a;
    a.streams = View(streams_d, DType::kF32, {c.n, c.hc, c.d});
    a.fn = View(fn_d, DType::kF32, {m, k});
    a.base = View(base_d, DType::kF32, {m});
    a.scale = View(scale_d, DType::kF32, {3});
    a.norm_weight = View(norm_d, DType::kF32, {c.d});
    a.workspace = View(ws_d, DType::kF32, {ws});
    a.x = View(x_d, DType::kBF16, {c.n, c.d});
    a.post = View(post_d, DType::kF32, {c.n, c.hc});
    a.comb = View(comb_d, DType::kF32, {c.n, c.hc, c.hc});
    a.sinkhorn_iters = static_cast<int>(c.iters);
    PG_ASSERT_OK(cuda::HyperConnectionPre(a, stream_.get()));
    const std::vector<float> got_x = DownloadBF16(x_d, x.size());
    EXPECT_TRUE(AllClose(got_x, x, ToleranceFor(DType::kBF16), "x"));
    EXPECT_TRUE(AllClose(Download<float>(post_d, post.size()), post, kMixTolerance, "post"));
    const std::vector<float> got_comb = Download<float>(comb_d, comb.size());
    EXPECT_TRUE(AllClose(got_comb, comb, kMixTolerance, "comb"));

    // Deterministic: a second run reproduces every bit.
    PG_ASSERT_OK(cuda::HyperConnectionPre(a, stream_.get()));
    EXPECT_EQ(DownloadBF16(x_d, x.size()), got_x);
    EXPECT_EQ(Download<float>(comb_d, comb.size()), got_comb);
  }

  void RunHead(const HcCase& c, const std::vector<int32_t>& rows, uint32_t seed) {
    SCOPED_TRACE(Name(c) + " rows=" + std::to_string(rows.size()));
    std::mt19937 rng(seed);
    const int64_t k = c.hc * c.d;
    HcWeights w = RandomWeights(rng, c.hc, k, c.d, 1);
    std::vector<float> streams = RandomStreams(rng, c.n, c.hc, c.d);
    const bool gather = !rows.empty();
    const int64_t r_n = gather ? static_cast<int64_t>(rows.size()) : c.n;
    std::vector<float> head_in(static_cast<size_t>(r_n * k), 0.0f);  // out-of-range rows stay zero
    for (int64_t r = 0; r < r_n; ++r) {
      const int64_t row = gather ? rows[static_cast<size_t>(r)] : r;
      if (row >= 0 && row < c.n) std::copy_n(streams.begin() + row * k, k, head_in.begin() + r * k);
    }
    std::vector<float> y(static_cast<size_t>(r_n * c.d));
    deepseek_v4::HyperConnectionHead(Config(c), w.View(c.hc, k), head_in.data(), r_n, y.data());
    cpu::RmsNorm(y.data(), w.norm.data(), y.data(), r_n, c.d, 1e-6f);

    cuda::DeviceBuffer streams_d = Upload(streams), fn_d = Upload(w.fn), base_d = Upload(w.base);
    cuda::DeviceBuffer scale_d = Upload(w.scale), norm_d = Upload(w.norm);
    cuda::DeviceBuffer rows_d = gather ? Upload(rows) : cuda::DeviceBuffer{};
    const int64_t ws = cuda::HyperConnectionWorkspaceFloats(r_n, c.hc, c.d, c.hc);
    cuda::DeviceBuffer ws_d = Poisoned(static_cast<size_t>(ws) * 4), y_d = Poisoned(y.size() * 2);
    cuda::HcHeadArgs a;
    a.streams = View(streams_d, DType::kF32, {c.n, c.hc, c.d});
    a.rows = gather ? View(rows_d, DType::kI32, {r_n}) : Tensor{};
    a.fn = View(fn_d, DType::kF32, {c.hc, k});
    a.base = View(base_d, DType::kF32, {c.hc});
    a.scale = View(scale_d, DType::kF32, {1});
    a.norm_weight = View(norm_d, DType::kF32, {c.d});
    a.workspace = View(ws_d, DType::kF32, {ws});
    a.y = View(y_d, DType::kBF16, {r_n, c.d});
    PG_ASSERT_OK(cuda::HyperConnectionHead(a, stream_.get()));
    EXPECT_TRUE(AllClose(DownloadBF16(y_d, y.size()), y, ToleranceFor(DType::kBF16), "y"));
  }

  void RunPost(const HcCase& c, uint32_t seed) {
    SCOPED_TRACE(Name(c));
    std::mt19937 rng(seed);
    std::vector<float> streams = RandomStreams(rng, c.n, c.hc, c.d);
    const std::vector<float> f = RoundedBF16(RandomNormal(rng, static_cast<size_t>(c.n * c.d)));
    const std::vector<float> post = RandomUniform(rng, static_cast<size_t>(c.n * c.hc), 0.0f, 2.0f);
    const std::vector<float> comb = RandomUniform(rng, static_cast<size_t>(c.n * c.hc * c.hc), 0.0f, 1.0f);
    cuda::DeviceBuffer streams_d = Upload(streams), f_d = Upload(ToBF16(f)), post_d = Upload(post),
                       comb_d = Upload(comb);
    deepseek_v4::HyperConnectionPost(Config(c), streams.data(), f.data(), post.data(), comb.data(), c.n);
    cuda::HcPostArgs a;
    a.streams = View(streams_d, DType::kF32, {c.n, c.hc, c.d});
    a.f = View(f_d, DType::kBF16, {c.n, c.d});
    a.post = View(post_d, DType::kF32, {c.n, c.hc});
    a.comb = View(comb_d, DType::kF32, {c.n, c.hc, c.hc});
    PG_ASSERT_OK(cuda::HyperConnectionPost(a, stream_.get()));
    EXPECT_TRUE(AllClose(Download<float>(streams_d, streams.size()), streams, ToleranceFor(DType::kF32), "streams"));
  }
};

TEST_F(HyperConnectionTest, PreSweep) {
  uint32_t seed = 1;
  for (int64_t d : {64, 128, 4096})
    for (int64_t hc : {1, 2, 3, 4})
      for (int64_t n : {1, 3, 17, 64, 130})
        for (int64_t iters : {1, 20}) RunPre({n, hc, d, iters}, seed++);
}

TEST_F(HyperConnectionTest, PreEveryMult) {
  // hc 5..8: the wider mix groups of the GEMM (M = 35 .. 80) and larger Sinkhorn matrices.
  uint32_t seed = 500;
  for (int64_t hc : {5, 6, 7, 8})
    for (int64_t n : {3, 33}) RunPre({n, hc, 64, 20}, seed++);
  RunPre({5, 8, 1024, 3}, seed++);
  RunPre({2, 4, 8192, 20}, seed++);  // the widest row the finalize keeps in registers
  RunPre({3, 2, 8, 20}, seed++);     // one partial stage
}

TEST_F(HyperConnectionTest, PostSweep) {
  uint32_t seed = 1000;
  for (int64_t d : {64, 128, 4096})
    for (int64_t hc : {1, 2, 3, 4, 8})
      for (int64_t n : {1, 3, 17, 64, 130}) RunPost({n, hc, d, 0}, seed++);
}

// The expansion that forms f as the MoE combine (one launch after a MoE sub-layer) gives the
// bits of MoeCombine followed by the plain expansion: with and without the shared expert,
// skipped assignments (id -1) included.
TEST_F(HyperConnectionTest, PostWithTheMoeCombineFusedMatchesCombineThenPost) {
  uint32_t seed = 4000;
  for (int64_t d : {64, 4096})
    for (int64_t k : {1, 6})
      for (int64_t n : {1, 4, 37})
        for (bool with_shared : {true, false}) {
          const int64_t hc = 4;
          SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k) + " D=" + std::to_string(d) +
                       (with_shared ? " shared" : ""));
          std::mt19937 rng(seed++);
          const std::vector<float> streams = RandomStreams(rng, n, hc, d);
          const std::vector<float> y = RandomNormal(rng, static_cast<size_t>(n * k * d));
          const std::vector<float> weights = RandomUniform(rng, static_cast<size_t>(n * k), 0.0f, 1.0f);
          std::vector<int32_t> ids(static_cast<size_t>(n * k));
          for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 5 == 3 ? -1 : static_cast<int32_t>(i % 7);
          const std::vector<float> shared = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n * d)));
          const std::vector<float> post = RandomUniform(rng, static_cast<size_t>(n * hc), 0.0f, 2.0f);
          const std::vector<float> comb = RandomUniform(rng, static_cast<size_t>(n * hc * hc), 0.0f, 1.0f);
          cuda::DeviceBuffer separate_d = Upload(streams), fused_d = Upload(streams), y_d = Upload(y),
                             weights_d = Upload(weights), ids_d = Upload(ids), shared_d = Upload(ToBF16(shared)),
                             post_d = Upload(post), comb_d = Upload(comb), f_d = Poisoned(static_cast<size_t>(n * d) * 2);

          cuda::MoeCombineArgs combine;
          combine.y = View(y_d, DType::kF32, {n * k, d});
          combine.topk_ids = View(ids_d, DType::kI32, {n, k});
          combine.topk_weights = View(weights_d, DType::kF32, {n, k});
          combine.shared = with_shared ? View(shared_d, DType::kBF16, {n, d}) : Tensor{};
          combine.out = View(f_d, DType::kBF16, {n, d});
          PG_ASSERT_OK(cuda::MoeCombine(combine, stream_.get()));
          cuda::HcPostArgs a;
          a.streams = View(separate_d, DType::kF32, {n, hc, d});
          a.f = combine.out;
          a.post = View(post_d, DType::kF32, {n, hc});
          a.comb = View(comb_d, DType::kF32, {n, hc, hc});
          PG_ASSERT_OK(cuda::HyperConnectionPost(a, stream_.get()));

          a.streams = View(fused_d, DType::kF32, {n, hc, d});
          a.f = Tensor{};
          a.moe_y = combine.y;
          a.moe_topk_ids = combine.topk_ids;
          a.moe_topk_weights = combine.topk_weights;
          a.moe_shared = combine.shared;
          PG_ASSERT_OK(cuda::HyperConnectionPost(a, stream_.get()));
          const std::vector<float> separate = Download<float>(separate_d, streams.size());
          EXPECT_EQ(Download<float>(fused_d, streams.size()), separate);
          EXPECT_NE(separate, streams);  // the expansion ran
        }
}

TEST_F(HyperConnectionTest, HeadSweep) {
  uint32_t seed = 2000;
  for (int64_t d : {64, 128, 4096})
    for (int64_t hc : {1, 2, 3, 4, 8})
      for (int64_t n : {1, 3, 17, 64, 130}) {
        RunHead({n, hc, d, 0}, {}, seed++);
        // The last token of each of a few sequences, in another order, one row twice.
        std::vector<int32_t> rows = {static_cast<int32_t>(n - 1), 0, static_cast<int32_t>(n / 2),
                                     static_cast<int32_t>(n - 1)};
        RunHead({n, hc, d, 0}, rows, seed++);
      }
}

TEST_F(HyperConnectionTest, HeadRowsOutOfRangeReadZeros) {
  RunHead({5, 4, 128, 0}, {-1, 2, 5, 1 << 30, 4}, 3000);
}

// pre -> post (the collapsed row itself as the sub-layer output) -> head, captured once; the
// streams are rewritten in place and the graph replayed, twice.
TEST_F(HyperConnectionTest, CapturedChainReplaysOnNewStreams) {
  const HcCase c{17, 4, 256, 20};
  const int64_t m = (2 + c.hc) * c.hc, k = c.hc * c.d;
  std::mt19937 rng(4000);
  HcWeights pre_w = RandomWeights(rng, m, k, c.d, 3);
  HcWeights head_w = RandomWeights(rng, c.hc, k, c.d, 1);
  const ModelConfig config = Config(c);
  const std::vector<int32_t> rows = {16, 3, 0};
  const int64_t r_n = static_cast<int64_t>(rows.size());

  cuda::DeviceBuffer streams_d = Poisoned(static_cast<size_t>(c.n * k) * 4);
  cuda::DeviceBuffer fn_d = Upload(pre_w.fn), base_d = Upload(pre_w.base), scale_d = Upload(pre_w.scale),
                     norm_d = Upload(pre_w.norm);
  cuda::DeviceBuffer hfn_d = Upload(head_w.fn), hbase_d = Upload(head_w.base), hscale_d = Upload(head_w.scale),
                     hnorm_d = Upload(head_w.norm), rows_d = Upload(rows);
  const int64_t ws = cuda::HyperConnectionWorkspaceFloats(c.n, c.hc, c.d, m);
  ASSERT_GE(ws, cuda::HyperConnectionWorkspaceFloats(r_n, c.hc, c.d, c.hc));
  cuda::DeviceBuffer ws_d = Poisoned(static_cast<size_t>(ws) * 4), x_d = Poisoned(static_cast<size_t>(c.n * c.d) * 2);
  cuda::DeviceBuffer post_d = Poisoned(static_cast<size_t>(c.n * c.hc) * 4);
  cuda::DeviceBuffer comb_d = Poisoned(static_cast<size_t>(c.n * c.hc * c.hc) * 4);
  cuda::DeviceBuffer y_d = Poisoned(static_cast<size_t>(r_n * c.d) * 2);

  cuda::HcPreArgs pre;
  pre.streams = View(streams_d, DType::kF32, {c.n, c.hc, c.d});
  pre.fn = View(fn_d, DType::kF32, {m, k});
  pre.base = View(base_d, DType::kF32, {m});
  pre.scale = View(scale_d, DType::kF32, {3});
  pre.norm_weight = View(norm_d, DType::kF32, {c.d});
  pre.workspace = View(ws_d, DType::kF32, {ws});
  pre.x = View(x_d, DType::kBF16, {c.n, c.d});
  pre.post = View(post_d, DType::kF32, {c.n, c.hc});
  pre.comb = View(comb_d, DType::kF32, {c.n, c.hc, c.hc});
  pre.sinkhorn_iters = static_cast<int>(c.iters);
  cuda::HcPostArgs post;
  post.streams = pre.streams;
  post.f = pre.x;
  post.post = pre.post;
  post.comb = pre.comb;
  cuda::HcHeadArgs head;
  head.streams = pre.streams;
  head.rows = View(rows_d, DType::kI32, {r_n});
  head.fn = View(hfn_d, DType::kF32, {c.hc, k});
  head.base = View(hbase_d, DType::kF32, {c.hc});
  head.scale = View(hscale_d, DType::kF32, {1});
  head.norm_weight = View(hnorm_d, DType::kF32, {c.d});
  head.workspace = pre.workspace;
  head.y = View(y_d, DType::kBF16, {r_n, c.d});

  PG_ASSERT_OK(cuda::Graph::BeginCapture(stream_.get()));
  Status captured = cuda::HyperConnectionPre(pre, stream_.get());
  if (captured.ok()) captured = cuda::HyperConnectionPost(post, stream_.get());
  if (captured.ok()) captured = cuda::HyperConnectionHead(head, stream_.get());
  auto graph = cuda::Graph::EndCapture(stream_.get());
  PG_ASSERT_OK(captured);
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();

  for (int replay = 0; replay < 2; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    std::vector<float> streams = RandomStreams(rng, c.n, c.hc, c.d);
    CopyIn(streams_d, streams);
    PG_ASSERT_OK(graph->Launch(stream_.get()));
    Sync();

    std::vector<float> x(static_cast<size_t>(c.n * c.d)), p(static_cast<size_t>(c.n * c.hc)),
        cb(static_cast<size_t>(c.n * c.hc * c.hc));
    deepseek_v4::HyperConnectionPre(config, pre_w.View(m, k), streams.data(), c.n, x.data(), p.data(), cb.data());
    cpu::RmsNorm(x.data(), pre_w.norm.data(), x.data(), c.n, c.d, 1e-6f);
    const std::vector<float> got_x = DownloadBF16(x_d, x.size());
    EXPECT_TRUE(AllClose(got_x, x, ToleranceFor(DType::kBF16), "x"));
    // The expansion used the device's bf16 x: so does the reference.
    deepseek_v4::HyperConnectionPost(config, streams.data(), got_x.data(), p.data(), cb.data(), c.n);
    EXPECT_TRUE(AllClose(Download<float>(streams_d, streams.size()), streams, kMixTolerance, "streams"));
    std::vector<float> head_in(static_cast<size_t>(r_n * k)), y(static_cast<size_t>(r_n * c.d));
    for (int64_t r = 0; r < r_n; ++r)
      std::copy_n(streams.begin() + rows[static_cast<size_t>(r)] * k, k, head_in.begin() + r * k);
    deepseek_v4::HyperConnectionHead(config, head_w.View(c.hc, k), head_in.data(), r_n, y.data());
    cpu::RmsNorm(y.data(), head_w.norm.data(), y.data(), r_n, c.d, 1e-6f);
    EXPECT_TRUE(AllClose(DownloadBF16(y_d, y.size()), y, ToleranceFor(DType::kBF16), "y"));
  }
}

// The lane mean into one column block of wider rows (the block drafter's taps): bit for bit
// the CPU model's StreamMean rounded to bf16; the other columns are left alone.
TEST_F(HyperConnectionTest, LaneMeanMatchesTheHostBitForBit) {
  uint32_t seed = 5000;
  for (int64_t d : {64, 4096})
    for (int64_t hc : {1, 2, 3, 4, 8})
      for (int64_t n : {1, 5, 130}) {
        const HcCase c{n, hc, d, 0};
        SCOPED_TRACE(Name(c));
        std::mt19937 rng(seed++);
        const std::vector<float> streams = RandomStreams(rng, n, hc, d);
        const int64_t taps = 3, column = d;  // the middle block of three
        std::vector<float> want(static_cast<size_t>(n * taps * d), 0.0f);
        deepseek_v4::StreamMean(Config(c), streams.data(), n, want.data() + column, taps * d);
        cuda::DeviceBuffer streams_d = Upload(streams), out_d = Poisoned(want.size() * 2);
        const std::vector<float> before = DownloadBF16(out_d, want.size());
        cuda::HcLaneMeanArgs a;
        a.streams = View(streams_d, DType::kF32, {n, hc, d});
        a.out = View(out_d, DType::kBF16, {n, taps * d});
        a.column = column;
        PG_ASSERT_OK(cuda::HyperConnectionLaneMean(a, stream_.get()));
        const std::vector<uint16_t> got = ToBF16(DownloadBF16(out_d, want.size()));
        const std::vector<uint16_t> expected = ToBF16(want), old = ToBF16(before);
        int64_t mismatches = 0;
        for (int64_t t = 0; t < n; ++t)
          for (int64_t e = 0; e < taps * d; ++e) {
            const auto i = static_cast<size_t>(t * taps * d + e);
            const bool inside = e >= column && e < column + d;
            mismatches += got[i] != (inside ? expected[i] : old[i]);
          }
        EXPECT_EQ(mismatches, 0);
      }
  cuda::DeviceBuffer buf = Poisoned(size_t{1} << 16);
  cuda::HcLaneMeanArgs bad;
  bad.streams = View(buf, DType::kF32, {2, 2, 64});
  bad.out = View(buf, DType::kBF16, {2, 128});
  bad.column = 72;  // past the row
  EXPECT_EQ(cuda::HyperConnectionLaneMean(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad.column = 4;  // not a multiple of 8
  EXPECT_EQ(cuda::HyperConnectionLaneMean(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
}

TEST_F(HyperConnectionTest, RejectsBadArguments) {
  const int64_t n = 4, hc = 4, d = 64, m = 24, k = hc * d;
  cuda::DeviceBuffer buf = Poisoned(size_t{1} << 20);
  auto at = [&](size_t offset, DType dtype, Shape shape) {
    return Tensor::Contiguous(static_cast<char*>(buf.data()) + offset, dtype, shape, Device::kCuda);
  };
  cuda::HcPreArgs a;
  a.streams = at(0, DType::kF32, {n, hc, d});
  a.fn = at(0, DType::kF32, {m, k});
  a.base = at(0, DType::kF32, {m});
  a.scale = at(0, DType::kF32, {3});
  a.norm_weight = at(0, DType::kF32, {d});
  const int64_t ws = cuda::HyperConnectionWorkspaceFloats(n, hc, d, m);
  a.workspace = at(0, DType::kF32, {ws});
  a.x = at(0, DType::kBF16, {n, d});
  a.post = at(0, DType::kF32, {n, hc});
  a.comb = at(0, DType::kF32, {n, hc, hc});
  EXPECT_TRUE(cuda::HyperConnectionPre(a, stream_.get()).ok());
  Sync();
  auto expect_invalid = [&](cuda::HcPreArgs bad) {
    EXPECT_EQ(cuda::HyperConnectionPre(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  };
  cuda::HcPreArgs bad = a;
  bad.workspace = at(0, DType::kF32, {ws - 1});
  expect_invalid(bad);
  bad = a;
  bad.fn = at(0, DType::kF32, {m - 1, k});
  expect_invalid(bad);
  bad = a;
  bad.x = at(0, DType::kF32, {n, d});
  expect_invalid(bad);
  bad = a;
  bad.streams = at(0, DType::kF32, {n, hc, 60});  // D not a multiple of 8
  expect_invalid(bad);
  bad = a;
  bad.streams = at(4, DType::kF32, {n, hc, d});  // misaligned
  expect_invalid(bad);
  bad = a;
  bad.sinkhorn_iters = 0;
  expect_invalid(bad);
  bad = a;
  bad.streams = at(0, DType::kF32, {1, 9, 8});  // hc beyond 8
  expect_invalid(bad);

  cuda::HcHeadArgs h;
  h.streams = a.streams;
  h.rows = at(0, DType::kI64, {2});
  h.fn = at(0, DType::kF32, {hc, k});
  h.base = at(0, DType::kF32, {hc});
  h.scale = at(0, DType::kF32, {1});
  h.norm_weight = a.norm_weight;
  h.workspace = a.workspace;
  h.y = at(0, DType::kBF16, {2, d});
  EXPECT_EQ(cuda::HyperConnectionHead(h, stream_.get()).code(), StatusCode::kInvalidArgument);
  h.rows = at(0, DType::kI32, {3});  // R disagrees with y
  EXPECT_EQ(cuda::HyperConnectionHead(h, stream_.get()).code(), StatusCode::kInvalidArgument);

  cuda::HcPostArgs p;
  p.streams = a.streams;
  p.f = at(0, DType::kBF16, {n, d});
  p.post = a.post;
  p.comb = at(0, DType::kF32, {n, hc, hc - 1});
  EXPECT_EQ(cuda::HyperConnectionPost(p, stream_.get()).code(), StatusCode::kInvalidArgument);
  // The fused combine: f and moe_y both or neither, and the combine's shapes.
  const int64_t top_k = 6;
  p.comb = a.comb;
  p.moe_y = at(0, DType::kF32, {n * top_k, d});
  p.moe_topk_ids = at(0, DType::kI32, {n, top_k});
  p.moe_topk_weights = at(0, DType::kF32, {n, top_k});
  EXPECT_EQ(cuda::HyperConnectionPost(p, stream_.get()).code(), StatusCode::kInvalidArgument);
  p.f = Tensor{};
  EXPECT_TRUE(cuda::HyperConnectionPost(p, stream_.get()).ok());
  Sync();
  cuda::HcPostArgs bad_post = p;
  bad_post.moe_y = at(0, DType::kF32, {n * top_k - 1, d});
  EXPECT_EQ(cuda::HyperConnectionPost(bad_post, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad_post = p;
  bad_post.moe_topk_weights = at(0, DType::kF32, {n, top_k + 1});
  EXPECT_EQ(cuda::HyperConnectionPost(bad_post, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad_post = p;
  bad_post.moe_shared = at(0, DType::kF32, {n, d});  // bf16 expected
  EXPECT_EQ(cuda::HyperConnectionPost(bad_post, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad_post = p;
  bad_post.moe_y = Tensor{};
  EXPECT_EQ(cuda::HyperConnectionPost(bad_post, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
