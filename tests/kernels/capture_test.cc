// Capture safety: each decode-path op is recorded once into a CUDA graph; the fixed metadata
// buffers (positions, lengths, page tables, index lists, schedule) are then rewritten and the
// graph replayed, and every replay must match the CPU reference for the new metadata.
// Also: the caching allocator makes no driver allocation once warm.
#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/ops/compressor_step.h"
#include "backend/cuda/ops/indexer.h"
#include "backend/cuda/ops/output_projection.h"
#include "backend/cuda/ops/rms_norm.h"
#include "backend/cuda/ops/rope.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "gpu_test_util.h"
#include "kernels/indexer_topk.cuh"

namespace peregrine::testing {
namespace {

class CaptureTest : public GpuTest {
 protected:
  template <typename F>
  cuda::Graph Capture(F&& enqueue) {
    EXPECT_TRUE(cuda::Graph::BeginCapture(stream_.get()).ok());
    const Status s = enqueue();
    EXPECT_TRUE(s.ok()) << s.ToString();
    auto graph = cuda::Graph::EndCapture(stream_.get());
    EXPECT_TRUE(graph.ok()) << graph.status().ToString();
    return graph.ok() ? std::move(graph).value() : cuda::Graph{};
  }
  void Replay(const cuda::Graph& graph) {
    PG_ASSERT_OK(graph.Launch(stream_.get()));
    Sync();
  }
};

// Indexer scores -> top-k -> sparse attention over the selected rows, as one graph.
TEST_F(CaptureTest, IndexerTopKAttentionChain) {
  std::mt19937 rng(3);
  const int64_t batch = 3, ih = 64, id = 128, h = 64, d = 512, k = 512, page = 64, max_pages = 40, window = 128;
  const int64_t num_pages = batch * max_pages, stride = max_pages * page, window_rows = batch * window;
  const int64_t num_positions = 8192, rope_dim = 64;
  std::vector<float> iq = RoundedBF16(RandomNormal(rng, static_cast<size_t>(batch * ih * id)));
  std::vector<float> iw = RandomNormal(rng, static_cast<size_t>(batch * ih), 0.2f);
  std::vector<float> keys = RoundedBF16(RandomNormal(rng, static_cast<size_t>(num_pages * page * id)));
  std::vector<float> q = RoundedBF16(RandomNormal(rng, static_cast<size_t>(batch * h * d)));
  std::vector<float> window_kv = RoundedBF16(RandomNormal(rng, static_cast<size_t>(window_rows * d)));
  std::vector<float> ckv = RoundedBF16(RandomNormal(rng, static_cast<size_t>(num_pages * page * d)));
  std::vector<float> sink = RandomNormal(rng, static_cast<size_t>(h));
  std::vector<float> cos, sin;
  MakeRopeTables(num_positions, rope_dim, 10000.0, cos, sin);

  cuda::DeviceBuffer iq_d = Upload(ToBF16(iq)), iw_d = Upload(iw), keys_d = Upload(ToBF16(keys));
  cuda::DeviceBuffer q_d = Upload(ToBF16(q)), window_d = Upload(ToBF16(window_kv)), ckv_d = Upload(ToBF16(ckv));
  cuda::DeviceBuffer sink_d = Upload(sink), cos_d = Upload(cos), sin_d = Upload(sin);
  // Fixed metadata buffers, rewritten between replays.
  cuda::DeviceBuffer entries_d = Poisoned(batch * 4), table_d = Poisoned(batch * max_pages * 4);
  cuda::DeviceBuffer widx_d = Poisoned(batch * window * 4), wlen_d = Poisoned(batch * 4), pos_d = Poisoned(batch * 4);
  const auto layout = cuda::SparseAttentionLayout(DeviceSmCount(), static_cast<int>(batch));
  cuda::DeviceBuffer schedule_d = Poisoned(static_cast<size_t>(layout.num_ints()) * 4);
  // Outputs and workspaces.
  cuda::DeviceBuffer scores_d = Poisoned(batch * stride * 4), idx_d = Poisoned(batch * k * 4, 0xab);
  cuda::DeviceBuffer count_d = Poisoned(batch * 4, 0xab), out_d = Poisoned(batch * h * d * 2);
  cuda::DeviceBuffer po_d = Poisoned(static_cast<size_t>(layout.max_segments * h * d) * 4);
  cuda::DeviceBuffer plse_d = Poisoned(static_cast<size_t>(layout.max_segments * h) * 4);

  cuda::IndexerScoresArgs sa;
  sa.q = View(iq_d, DType::kBF16, {batch, ih, id});
  sa.weights = View(iw_d, DType::kF32, {batch, ih});
  sa.keys = View(keys_d, DType::kBF16, {num_pages, page, id});
  sa.page_table = View(table_d, DType::kI32, {batch, max_pages});
  sa.num_entries = View(entries_d, DType::kI32, {batch});
  sa.scores = View(scores_d, DType::kF32, {batch, stride});
  sa.scale = 1.0f / std::sqrt(static_cast<float>(id));
  sa.num_ctas = 4 * DeviceSmCount();
  cuda::IndexerTopKArgs ta;
  ta.scores = sa.scores;
  ta.num_entries = sa.num_entries;
  ta.indices = View(idx_d, DType::kI32, {batch, k});
  ta.counts = View(count_d, DType::kI32, {batch});
  // Rows here are short (no workspace needed); passed as the model does, zeroed once.
  cuda::DeviceBuffer topk_ws_d = Poisoned(static_cast<size_t>(batch * kernels::kIndexerTopKWorkspaceInts) * 4, 0);
  ta.workspace = View(topk_ws_d, DType::kI32, {batch, kernels::kIndexerTopKWorkspaceInts});
  ta.num_ctas = DeviceSmCount();
  cuda::SparseAttentionArgs aa;
  aa.q = View(q_d, DType::kBF16, {batch, h, d});
  aa.window_kv = View(window_d, DType::kBF16, {window_rows, d});
  aa.window_indices = View(widx_d, DType::kI32, {batch, window});
  aa.window_lengths = View(wlen_d, DType::kI32, {batch});
  aa.compressed_kv = View(ckv_d, DType::kBF16, {num_pages, page, d});
  aa.page_table = sa.page_table;
  aa.compressed_indices = ta.indices;
  aa.compressed_lengths = ta.counts;
  aa.sink = View(sink_d, DType::kF32, {h});
  aa.positions = View(pos_d, DType::kI32, {batch});
  aa.rope_cos = View(cos_d, DType::kF32, {num_positions, rope_dim / 2});
  aa.rope_sin = View(sin_d, DType::kF32, {num_positions, rope_dim / 2});
  aa.rope_dim = rope_dim;
  aa.scale = 1.0f / std::sqrt(static_cast<float>(d));
  aa.layout = layout;
  aa.schedule = View(schedule_d, DType::kI32, {layout.num_ints()});
  aa.partial_o = View(po_d, DType::kF32, {layout.max_segments, h, d});
  aa.partial_lse = View(plse_d, DType::kF32, {layout.max_segments, h});
  aa.out = View(out_d, DType::kBF16, {batch, h, d});

  // One step's metadata: positions -> visible entries, window rows of each request's ring.
  auto set_metadata = [&](const std::vector<int32_t>& positions) {
    std::vector<int32_t> entries(static_cast<size_t>(batch)), wlen(static_cast<size_t>(batch));
    std::vector<int32_t> widx(static_cast<size_t>(batch * window), -1), table(static_cast<size_t>(batch * max_pages));
    std::vector<int32_t> perm(static_cast<size_t>(num_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), table.size(), table.begin());
    std::vector<int64_t> rows(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      const int32_t pos = positions[static_cast<size_t>(b)];
      entries[static_cast<size_t>(b)] = (pos + 1) / 4;
      const int32_t first = std::max(0, pos - static_cast<int32_t>(window) + 1);
      wlen[static_cast<size_t>(b)] = pos - first + 1;
      for (int32_t p = first; p <= pos; ++p)
        widx[static_cast<size_t>(b * window + (p - first))] = static_cast<int32_t>(b * window + p % window);
      rows[static_cast<size_t>(b)] = wlen[static_cast<size_t>(b)] + std::min<int64_t>(k, entries[static_cast<size_t>(b)]);
    }
    std::vector<int32_t> schedule(static_cast<size_t>(layout.num_ints()));
    EXPECT_TRUE(cuda::PlanSparseAttention(rows, layout, schedule).ok());
    CopyIn(entries_d, entries);
    CopyIn(table_d, table);
    CopyIn(wlen_d, wlen);
    CopyIn(widx_d, widx);
    CopyIn(pos_d, positions);
    CopyIn(schedule_d, schedule);
    return std::tuple{entries, table, wlen, widx};
  };
  auto check = [&](const std::vector<int32_t>& positions, const std::vector<int32_t>& entries,
                   const std::vector<int32_t>& table, const std::vector<int32_t>& wlen,
                   const std::vector<int32_t>& widx) {
    cpu::ThreadPool pool(2);
    cpu::IndexerScoresInputs si;
    si.q = iq.data();
    si.weights = iw.data();
    si.keys = keys.data();
    si.page_table = table.data();
    si.num_entries = entries.data();
    si.batch = batch;
    si.heads = ih;
    si.dim = id;
    si.page_size = page;
    si.max_pages = max_pages;
    si.scale = sa.scale;
    std::vector<float> want_scores(static_cast<size_t>(batch * stride), 0.0f);
    cpu::IndexerScores(pool, si, want_scores.data(), stride);
    std::vector<float> got_scores = Download<float>(scores_d, want_scores.size());
    std::vector<float> g, w;
    for (int64_t b = 0; b < batch; ++b)
      for (int32_t e = 0; e < entries[static_cast<size_t>(b)]; ++e) {
        g.push_back(got_scores[static_cast<size_t>(b * stride + e)]);
        w.push_back(want_scores[static_cast<size_t>(b * stride + e)]);
      }
    EXPECT_TRUE(AllClose(g, w, {2e-5, 1e-4}, "scores"));
    // Selection from the device's own scores, so that near-ties cannot differ.
    std::vector<int32_t> want_idx(static_cast<size_t>(batch * k)), want_count(static_cast<size_t>(batch));
    cpu::IndexerTopK(got_scores.data(), entries.data(), batch, stride, k, want_idx.data(), want_count.data());
    EXPECT_EQ(Download<int32_t>(idx_d, want_idx.size()), want_idx);
    EXPECT_EQ(Download<int32_t>(count_d, want_count.size()), want_count);
    cpu::SparseAttentionInputs ai;
    ai.q = q.data();
    ai.window_kv = window_kv.data();
    ai.window_indices = widx.data();
    ai.window_lengths = wlen.data();
    ai.compressed_kv = ckv.data();
    ai.page_table = table.data();
    ai.compressed_indices = want_idx.data();
    ai.compressed_lengths = want_count.data();
    ai.sink = sink.data();
    ai.positions = positions.data();
    ai.rope_cos = cos.data();
    ai.rope_sin = sin.data();
    ai.batch = batch;
    ai.heads = h;
    ai.dim = d;
    ai.num_window_rows = window_rows;
    ai.window_capacity = window;
    ai.num_compressed_rows = num_pages * page;
    ai.page_size = page;
    ai.max_pages = max_pages;
    ai.compressed_capacity = k;
    ai.rope_dim = rope_dim;
    ai.num_positions = num_positions;
    ai.scale = aa.scale;
    std::vector<float> want_out(static_cast<size_t>(batch * h * d));
    cpu::SparseAttentionDecode(pool, ai, want_out.data());
    EXPECT_TRUE(AllClose(DownloadBF16(out_d, want_out.size()), want_out, ToleranceFor(DType::kBF16), "out"));
  };

  const std::vector<int32_t> first_positions = {2047, 130, 5};
  auto [e1, t1, wl1, wi1] = set_metadata(first_positions);
  cuda::Graph graph = Capture([&]() -> Status {
    PG_RETURN_IF_ERROR(cuda::IndexerScores(sa, stream_.get()));
    PG_RETURN_IF_ERROR(cuda::IndexerTopK(ta, stream_.get()));
    return cuda::SparseAttentionDecode(aa, stream_.get());
  });
  Replay(graph);
  {
    SCOPED_TRACE("first metadata");
    check(first_positions, e1, t1, wl1, wi1);
  }
  for (const std::vector<int32_t>& positions :
       {std::vector<int32_t>{9, 2559, 700}, std::vector<int32_t>{2559, 2559, 0}, std::vector<int32_t>{3, 4, 1500}}) {
    SCOPED_TRACE("replay at positions " + std::to_string(positions[0]) + ", " + std::to_string(positions[1]) + ", " +
                 std::to_string(positions[2]));
    Poison(out_d);
    Poison(idx_d, 0xab);
    auto [e, t, wl, wi] = set_metadata(positions);
    Replay(graph);
    check(positions, e, t, wl, wi);
  }
}

// The long-row top-k (1M-token contexts: several CTAs per request, the gather's shared
// memory set at launch, the workspace's counters reset by each call) captured once and
// replayed on new scores and lengths: every replay equals the CPU selection exactly.
TEST_F(CaptureTest, LongRowTopKReplays) {
  std::mt19937 rng(11);
  const int64_t batch = 3, stride = 262144, k = 512;
  cuda::DeviceBuffer scores_d = Poisoned(static_cast<size_t>(batch * stride) * 4);
  cuda::DeviceBuffer entries_d = Poisoned(batch * 4), idx_d = Poisoned(batch * k * 4, 0xab);
  cuda::DeviceBuffer count_d = Poisoned(batch * 4, 0xab);
  cuda::DeviceBuffer ws_d = Poisoned(static_cast<size_t>(batch * kernels::kIndexerTopKWorkspaceInts) * 4, 0);
  cuda::IndexerTopKArgs ta;
  ta.scores = View(scores_d, DType::kF32, {batch, stride});
  ta.num_entries = View(entries_d, DType::kI32, {batch});
  ta.indices = View(idx_d, DType::kI32, {batch, k});
  ta.counts = View(count_d, DType::kI32, {batch});
  ta.workspace = View(ws_d, DType::kI32, {batch, kernels::kIndexerTopKWorkspaceInts});
  ta.num_ctas = DeviceSmCount();

  std::vector<float> scores;
  std::vector<int32_t> entries;
  auto set_inputs = [&](const std::vector<int32_t>& lengths) {
    scores = RandomNormal(rng, static_cast<size_t>(batch * stride));
    entries = lengths;
    CopyIn(scores_d, scores);
    CopyIn(entries_d, entries);
  };
  auto check = [&] {
    std::vector<int32_t> want_idx(static_cast<size_t>(batch * k)), want_count(static_cast<size_t>(batch));
    cpu::IndexerTopK(scores.data(), entries.data(), batch, stride, k, want_idx.data(), want_count.data());
    EXPECT_EQ(Download<int32_t>(count_d, static_cast<size_t>(batch)), want_count);
    EXPECT_EQ(Download<int32_t>(idx_d, static_cast<size_t>(batch * k)), want_idx);
  };
  set_inputs({262144, 100003, 7000});
  cuda::Graph graph = Capture([&]() -> Status { return cuda::IndexerTopK(ta, stream_.get()); });
  Replay(graph);
  check();
  for (const std::vector<int32_t>& lengths : {std::vector<int32_t>{6145, 262143, 262144},
                                              std::vector<int32_t>{300, 131072, 16385}}) {
    SCOPED_TRACE("replay with lengths " + std::to_string(lengths[0]) + ", " + std::to_string(lengths[1]) + ", " +
                 std::to_string(lengths[2]));
    Poison(idx_d, 0xab);
    Poison(count_d, 0xab);
    set_inputs(lengths);
    Replay(graph);
    check();
  }
}

// RMSNorm -> RoPE -> compressor step as one graph, replayed over consecutive positions with
// the position and slot buffers rewritten each step.
TEST_F(CaptureTest, NormRopeCompressorSteps) {
  std::mt19937 rng(5);
  const int64_t batch = 3, dim = 512, ratio = 4, coff = 2, width = coff * dim, slots = 4, page = 16, max_pages = 4;
  const int64_t num_pages = batch * max_pages, num_positions = 256, rope_dim = 64;
  std::vector<float> x = RandomNormal(rng, static_cast<size_t>(batch * dim));
  std::vector<float> norm_w = RandomUniform(rng, static_cast<size_t>(dim), 0.5f, 1.5f);
  std::vector<float> kv = RandomNormal(rng, static_cast<size_t>(batch * width));
  std::vector<float> gate = RandomNormal(rng, static_cast<size_t>(batch * width));
  std::vector<float> ape = RandomNormal(rng, static_cast<size_t>(ratio * width), 0.5f);
  std::vector<float> kv_state = RandomNormal(rng, static_cast<size_t>(slots * coff * ratio * width));
  std::vector<float> gate_state = RandomNormal(rng, kv_state.size());
  std::vector<float> cache = RoundedBF16(RandomNormal(rng, static_cast<size_t>(num_pages * page * dim)));
  std::vector<int32_t> table(static_cast<size_t>(batch * max_pages));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> cos, sin;
  MakeRopeTables(num_positions, rope_dim, 10000.0, cos, sin);

  cuda::DeviceBuffer x_d = Upload(x), y_d = Poisoned(batch * dim * 4), norm_d = Upload(norm_w);
  cuda::DeviceBuffer kv_d = Upload(kv), gate_d = Upload(gate), ape_d = Upload(ape);
  cuda::DeviceBuffer kvs_d = Upload(kv_state), gs_d = Upload(gate_state), cache_d = Upload(ToBF16(cache));
  cuda::DeviceBuffer table_d = Upload(table), cos_d = Upload(cos), sin_d = Upload(sin);
  cuda::DeviceBuffer pos_d = Poisoned(batch * 4), slot_d = Poisoned(batch * 4);

  cuda::RmsNormArgs na;
  na.x = View(x_d, DType::kF32, {batch, dim});
  na.weight = View(norm_d, DType::kF32, {dim});
  na.y = View(y_d, DType::kF32, {batch, dim});
  cuda::RopeArgs ra;
  ra.x = na.y;
  ra.positions = View(pos_d, DType::kI32, {batch});
  ra.cos = View(cos_d, DType::kF32, {num_positions, rope_dim / 2});
  ra.sin = View(sin_d, DType::kF32, {num_positions, rope_dim / 2});
  ra.rope_dim = rope_dim;
  cuda::CompressorStepArgs ca;
  ca.kv = View(kv_d, DType::kF32, {batch, width});
  ca.gate = View(gate_d, DType::kF32, {batch, width});
  ca.ape = View(ape_d, DType::kF32, {ratio, width});
  ca.kv_state = View(kvs_d, DType::kF32, {slots, coff * ratio, width});
  ca.gate_state = View(gs_d, DType::kF32, {slots, coff * ratio, width});
  ca.state_slots = View(slot_d, DType::kI32, {batch});
  ca.positions = ra.positions;
  ca.norm_weight = na.weight;
  ca.rope_cos = ra.cos;
  ca.rope_sin = ra.sin;
  ca.cache = View(cache_d, DType::kBF16, {num_pages, page, dim});
  ca.page_table = View(table_d, DType::kI32, {batch, max_pages});
  ca.ratio = ratio;
  ca.coff = coff;
  ca.rope_dim = rope_dim;

  std::vector<int32_t> positions = {0, 6, 13};
  std::vector<int32_t> state_slots = {3, 0, 2};
  CopyIn(pos_d, positions);
  CopyIn(slot_d, state_slots);
  cuda::Graph graph = Capture([&]() -> Status {
    PG_RETURN_IF_ERROR(cuda::RmsNorm(na, stream_.get()));
    PG_RETURN_IF_ERROR(cuda::Rope(ra, stream_.get()));
    return cuda::CompressorStep(ca, stream_.get());
  });

  cpu::CompressorStepInputs ref;
  ref.kv = kv.data();
  ref.gate = gate.data();
  ref.ape = ape.data();
  ref.kv_state = kv_state.data();
  ref.gate_state = gate_state.data();
  ref.state_slots = state_slots.data();
  ref.positions = positions.data();
  ref.norm_weight = norm_w.data();
  ref.rope_cos = cos.data();
  ref.rope_sin = sin.data();
  ref.cache = cache.data();
  ref.page_table = table.data();
  ref.batch = batch;
  ref.dim = dim;
  ref.ratio = ratio;
  ref.coff = coff;
  ref.rope_dim = rope_dim;
  ref.num_positions = num_positions;
  ref.num_state_slots = slots;
  ref.page_size = page;
  ref.max_pages = max_pages;
  ref.num_cache_rows = num_pages * page;
  for (int step = 0; step < 10; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (step == 5) state_slots = {1, 0, 2};  // a request moves to another ring slot
    CopyIn(pos_d, positions);
    CopyIn(slot_d, state_slots);
    Poison(y_d);
    Replay(graph);
    cpu::CompressorStep(ref);
    std::vector<float> want_y(static_cast<size_t>(batch * dim));
    cpu::RmsNorm(x.data(), norm_w.data(), want_y.data(), batch, dim, 1e-6f);
    cpu::RopeAtPositions(want_y.data(), batch, dim, rope_dim, positions.data(), 1, cos.data(), sin.data(),
                         num_positions, false);
    EXPECT_TRUE(AllClose(Download<float>(y_d, want_y.size()), want_y, ToleranceFor(DType::kF32), "y"));
    EXPECT_TRUE(AllClose(Download<float>(kvs_d, kv_state.size()), kv_state, ToleranceFor(DType::kF32), "kv_state"));
    EXPECT_TRUE(AllClose(DownloadBF16(cache_d, cache.size()), cache, ToleranceFor(DType::kBF16), "cache"));
    for (int32_t& p : positions) ++p;
  }
}

TEST_F(CaptureTest, OutputProjection) {
  std::mt19937 rng(9);
  const int64_t batch = 4, heads = 64, dim = 512, groups = 8, rank = 256, hidden = 512;
  const int64_t group_in = heads * dim / groups;
  std::vector<float> wo_a = RoundedBF16(RandomNormal(rng, static_cast<size_t>(groups * rank * group_in), 0.02f));
  std::vector<float> wo_b = RoundedBF16(RandomNormal(rng, static_cast<size_t>(hidden * groups * rank), 0.02f));
  auto blas = cuda::Blas::Create(*allocator_);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  cuda::DeviceBuffer o_d = Poisoned(batch * heads * dim * 2), a_d = Upload(ToBF16(wo_a)), b_d = Upload(ToBF16(wo_b));
  cuda::DeviceBuffer mid_d = Poisoned(batch * groups * rank * 2), out_d = Poisoned(batch * hidden * 2);
  cuda::OutputProjectionArgs args;
  args.o = View(o_d, DType::kBF16, {batch, heads, dim});
  args.wo_a = View(a_d, DType::kBF16, {groups, rank, group_in});
  args.wo_b = View(b_d, DType::kBF16, {hidden, groups * rank});
  args.mid = View(mid_d, DType::kBF16, {batch, groups, rank});
  args.out = View(out_d, DType::kBF16, {batch, hidden});
  std::vector<float> o = RoundedBF16(RandomNormal(rng, static_cast<size_t>(batch * heads * dim)));
  CopyIn(o_d, ToBF16(o));
  // Warm cuBLAS (heuristics, kernels) before capturing.
  PG_ASSERT_OK(cuda::GroupedOutputProjection(*blas, args, stream_.get()));
  Sync();
  cuda::Graph graph = Capture([&]() { return cuda::GroupedOutputProjection(*blas, args, stream_.get()); });
  cpu::ThreadPool pool(2);
  for (int round = 0; round < 2; ++round) {
    o = RoundedBF16(RandomNormal(rng, o.size()));
    CopyIn(o_d, ToBF16(o));
    Poison(out_d);
    Replay(graph);
    std::vector<float> want(static_cast<size_t>(batch * hidden));
    cpu::GroupedOutputProjection(pool, o.data(), wo_a.data(), wo_b.data(), batch, heads, dim, groups, rank, hidden,
                                 want.data());
    EXPECT_TRUE(AllClose(DownloadBF16(out_d, want.size()), want, {1e-2, 2e-2}, "out"));
  }
}

TEST_F(CaptureTest, AllocatorMakesNoDriverCallsOnceWarm) {
  cuda::CudaRawAllocator raw;
  cuda::CachingAllocator allocator(raw);
  const size_t sizes[] = {100, 1000, 5000, 1 << 20, (3 << 20) + 7, 64 << 20};
  int64_t raw_after_warmup = 0;
  for (int round = 0; round < 4; ++round) {
    std::vector<cuda::DeviceBuffer> held;
    for (size_t bytes : sizes) {
      auto buffer = allocator.Allocate(bytes);
      ASSERT_TRUE(buffer.ok()) << buffer.status().ToString();
      EXPECT_GE(buffer->capacity(), bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer->data()) % 256, 0u);
      held.push_back(std::move(buffer).value());
    }
    if (round == 0) raw_after_warmup = allocator.stats().num_raw_allocations;
  }
  const cuda::AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.num_raw_allocations, raw_after_warmup);
  EXPECT_EQ(stats.num_raw_allocations, static_cast<int64_t>(std::size(sizes)));
  EXPECT_EQ(stats.num_cache_hits, 3 * static_cast<int64_t>(std::size(sizes)));
  EXPECT_EQ(stats.bytes_in_use, 0u);
  allocator.Trim();
  EXPECT_EQ(allocator.stats().bytes_cached, 0u);
  EXPECT_EQ(allocator.stats().num_raw_frees, static_cast<int64_t>(std::size(sizes)));
}

}  // namespace
}  // namespace peregrine::testing
