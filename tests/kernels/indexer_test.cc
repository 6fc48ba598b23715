// Lightning indexer: scores vs cpu::IndexerScores (configs x batch x lengths across page and
// chunk boundaries, shuffled pages; entries past a request's length stay untouched), and
// top-k vs cpu::IndexerTopK exactly (random, tied, all-equal and signed-zero scores; k larger
// than the available entries; long rows that take every radix path; 262,144-entry rows split
// over several CTAs at several grid sizes, with mixed lengths, heavy ties at the boundary, few
// distinct values and all-equal rows, each call run twice on one workspace).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/ops/indexer.h"
#include "gpu_test_util.h"
#include "kernels/indexer_scores.cuh"
#include "kernels/indexer_topk.cuh"

namespace peregrine::testing {
namespace {

class IndexerTest : public GpuTest {
 protected:
  // Requests address rows of a shared table (page_table_rows), as block tables do.
  bool shared_tables_ = false;

  // Scores for `lengths` with (heads, dim), page size `page_size`; then top-k on the GPU's
  // scores compared exactly with the CPU's top-k of the same scores.
  void RunScores(int64_t heads, int64_t dim, int64_t page_size, const std::vector<int32_t>& lengths, int64_t k,
                 uint32_t seed) {
    const int64_t batch = static_cast<int64_t>(lengths.size());
    SCOPED_TRACE("IH=" + std::to_string(heads) + " Id=" + std::to_string(dim) + " P=" + std::to_string(page_size) +
                 " B=" + std::to_string(batch) + " k=" + std::to_string(k));
    std::mt19937 rng(seed);
    const int64_t max_len = *std::max_element(lengths.begin(), lengths.end());
    const int64_t max_pages = (max_len + page_size - 1) / page_size + 2;
    const int64_t num_pages = batch * max_pages + 1;
    const int64_t stride = (max_len + 64 + 3) / 4 * 4;
    std::vector<float> q = RoundedBF16(RandomNormal(rng, static_cast<size_t>(batch * heads * dim)));
    std::vector<float> keys = RoundedBF16(RandomNormal(rng, static_cast<size_t>(num_pages * page_size * dim)));
    std::vector<float> weights = RandomNormal(rng, static_cast<size_t>(batch * heads), 0.2f);
    std::vector<int32_t> pages(static_cast<size_t>(num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<int32_t> page_table(static_cast<size_t>(batch * max_pages));
    for (size_t i = 0; i < page_table.size(); ++i) page_table[i] = pages[i];

    cpu::ThreadPool pool(2);
    cpu::IndexerScoresInputs in;
    in.q = q.data();
    in.weights = weights.data();
    in.keys = keys.data();
    in.page_table = page_table.data();
    in.num_entries = lengths.data();
    in.batch = batch;
    in.heads = heads;
    in.dim = dim;
    in.page_size = page_size;
    in.max_pages = max_pages;
    in.scale = 1.0f / std::sqrt(static_cast<float>(dim));
    std::vector<float> want(static_cast<size_t>(batch * stride), std::nanf(""));
    cpu::IndexerScores(pool, in, want.data(), stride);

    cuda::DeviceBuffer q_d = Upload(ToBF16(q)), keys_d = Upload(ToBF16(keys)), w_d = Upload(weights);
    cuda::DeviceBuffer table_d = Upload(page_table), len_d = Upload(lengths);
    cuda::DeviceBuffer scores_d = Poisoned(static_cast<size_t>(batch * stride) * 4);
    cuda::IndexerScoresArgs args;
    args.q = View(q_d, DType::kBF16, {batch, heads, dim});
    args.weights = View(w_d, DType::kF32, {batch, heads});
    args.keys = View(keys_d, DType::kBF16, {num_pages, page_size, dim});
    args.page_table = View(table_d, DType::kI32, {batch, max_pages});
    cuda::DeviceBuffer rows_d;
    if (shared_tables_)
      UploadSharedRows(page_table, batch, max_pages, &table_d, &rows_d, &args.page_table, &args.page_table_rows);
    args.num_entries = View(len_d, DType::kI32, {batch});
    args.scores = View(scores_d, DType::kF32, {batch, stride});
    args.scale = in.scale;
    args.num_ctas = 4 * DeviceSmCount();
    PG_ASSERT_OK(cuda::IndexerScores(args, stream_.get()));
    const std::vector<float> got = Download<float>(scores_d, want.size());
    std::vector<float> got_valid, want_valid;
    int64_t touched_past_length = 0;
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t e = 0; e < stride; ++e) {
        const size_t i = static_cast<size_t>(b * stride + e);
        if (e < lengths[static_cast<size_t>(b)]) {
          got_valid.push_back(got[i]);
          want_valid.push_back(want[i]);
        } else {
          uint32_t bits;
          std::memcpy(&bits, &got[i], 4);
          touched_past_length += bits != 0xffffffffu;
        }
      }
    EXPECT_TRUE(AllClose(got_valid, want_valid, {2e-5, 1e-4}, "scores"));
    EXPECT_EQ(touched_past_length, 0) << "entries past a request's length were written";

    // Top-k of exactly these scores, on both sides.
    RunTopK(got, lengths, stride, k, /*scores_d=*/&scores_d);
  }

  // Top-k on the GPU vs cpu::IndexerTopK, exactly. Runs twice on the same workspace (the first
  // call must leave it reusable); `paths` receives each request's long-row path
  // (kernels::IndexerTopKPath) when given.
  void RunTopK(const std::vector<float>& scores, const std::vector<int32_t>& lengths, int64_t stride, int64_t k,
               const cuda::DeviceBuffer* scores_on_device = nullptr, int num_ctas = 0,
               std::vector<int32_t>* paths = nullptr) {
    const int64_t batch = static_cast<int64_t>(lengths.size());
    if (num_ctas == 0) num_ctas = DeviceSmCount();
    SCOPED_TRACE("topk B=" + std::to_string(batch) + " k=" + std::to_string(k) + " S=" + std::to_string(stride) +
                 " num_ctas=" + std::to_string(num_ctas));
    std::vector<int32_t> want_idx(static_cast<size_t>(batch * k)), want_count(static_cast<size_t>(batch));
    cpu::IndexerTopK(scores.data(), lengths.data(), batch, stride, k, want_idx.data(), want_count.data());
    cuda::DeviceBuffer uploaded;
    if (scores_on_device == nullptr) uploaded = Upload(scores);
    const cuda::DeviceBuffer& s_d = scores_on_device != nullptr ? *scores_on_device : uploaded;
    cuda::DeviceBuffer len_d = Upload(lengths);
    const int64_t ws_ints = kernels::kIndexerTopKWorkspaceInts;
    cuda::DeviceBuffer ws_d = Poisoned(static_cast<size_t>(batch * ws_ints) * 4, 0);
    for (int call = 0; call < 2; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      cuda::DeviceBuffer idx_d = Poisoned(static_cast<size_t>(batch * k) * 4, 0xab);
      cuda::DeviceBuffer count_d = Poisoned(static_cast<size_t>(batch) * 4, 0xab);
      cuda::IndexerTopKArgs args;
      args.scores = View(s_d, DType::kF32, {batch, stride});
      args.num_entries = View(len_d, DType::kI32, {batch});
      args.indices = View(idx_d, DType::kI32, {batch, k});
      args.counts = View(count_d, DType::kI32, {batch});
      args.workspace = View(ws_d, DType::kI32, {batch, ws_ints});
      args.num_ctas = num_ctas;
      PG_ASSERT_OK(cuda::IndexerTopK(args, stream_.get()));
      const std::vector<int32_t> got_idx = Download<int32_t>(idx_d, want_idx.size());
      const std::vector<int32_t> got_count = Download<int32_t>(count_d, want_count.size());
      const std::vector<int32_t> ws = Download<int32_t>(ws_d, static_cast<size_t>(batch * ws_ints));
      EXPECT_EQ(got_count, want_count);
      for (int64_t b = 0; b < batch; ++b) {
        const auto first = static_cast<size_t>(b * k);
        const int32_t* w_b = ws.data() + b * ws_ints;
        const std::string diag = " (long-row path " + std::to_string(w_b[2]) + ", candidates " +
                                 std::to_string(w_b[3]) + "; 1 shared list, 2 global list, 3 whole row)";
        EXPECT_TRUE(w_b[0] == 0 && w_b[1] == 0)
            << "request " << b << ": workspace counters not reset: " << w_b[0] << ", " << w_b[1] << diag;
        const std::vector<int32_t> g(got_idx.begin() + first, got_idx.begin() + first + k);
        const std::vector<int32_t> w(want_idx.begin() + first, want_idx.begin() + first + k);
        if (g != w) {
          size_t j = 0;
          while (g[j] == w[j]) ++j;
          ADD_FAILURE() << "request " << b << " (n=" << lengths[static_cast<size_t>(b)] << "): first difference at "
                        << j << ": got " << g[j] << ", want " << w[j] << diag;
        }
        if (paths != nullptr && call == 1) paths->push_back(w_b[2]);
      }
    }
  }
};

TEST_F(IndexerTest, ScoresAndTopKSweep) {
  uint32_t seed = 1;
  const std::vector<std::vector<int32_t>> batches = {
      {1},
      {0, 63, 64},
      {65, 512, 513},
      {3, 1000, 2049, 127, 128, 129, 1, 0, 777, 64, 4096, 5, 511, 300, 2, 65, 1999},  // B = 17
  };
  for (auto [heads, dim] : {std::pair<int64_t, int64_t>{64, 128}, {8, 64}})
    for (int64_t page_size : {64, 16})
      for (const auto& lengths : batches)
        for (int64_t k : {512, 7}) RunScores(heads, dim, page_size, lengths, k, seed++);
}

TEST_F(IndexerTest, SharedPageTableRows) {
  shared_tables_ = true;
  for (const auto& c : kernels::kIndexerScoresConfigs)
    RunScores(c.heads, c.dim, 64, {1, 300, 0, 64, 4097}, 32, 71);
}

TEST_F(IndexerTest, TopKTiesAndDistributions) {
  std::mt19937 rng(7);
  const int64_t stride = 8192;
  const std::vector<int32_t> lengths = {8192, 8000, 513, 512, 100, 4097};
  const int64_t batch = static_cast<int64_t>(lengths.size());
  // Quantised to 16 levels: the threshold sits inside a large group of equal scores.
  std::vector<float> scores = RandomUniform(rng, static_cast<size_t>(batch * stride), -1.0f, 1.0f);
  for (float& s : scores) s = std::round(s * 8.0f) / 8.0f;
  for (int64_t k : {512, 1, 2048, 100}) RunTopK(scores, lengths, stride, k);
  // All equal: the lowest indices win; exercises the passes over index bits.
  std::fill(scores.begin(), scores.end(), 0.25f);
  RunTopK(scores, lengths, stride, 512);
  // Signed zeros and negatives tie as equal values.
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = (i % 3 == 0) ? -0.0f : (i % 3 == 1 ? 0.0f : -1.0f);
  RunTopK(scores, lengths, stride, 512);
  // Continuous random values with a heavy tail.
  scores = RandomNormal(rng, scores.size());
  for (float& s : scores) s = s * s * s;
  RunTopK(scores, lengths, stride, 512);
}

TEST_F(IndexerTest, TopKLongRows) {
  // 1M-token contexts: 262144 entries, every radix path (candidates overflow when all tie).
  std::mt19937 rng(11);
  const int64_t stride = 262144;
  const std::vector<int32_t> lengths = {262144, 262143, 200000};
  std::vector<float> scores = RandomNormal(rng, static_cast<size_t>(3 * stride));
  RunTopK(scores, lengths, stride, 512);
  for (float& s : scores) s = std::round(s * 4.0f);
  RunTopK(scores, lengths, stride, 512);
  RunTopK(scores, lengths, stride, kernels::kIndexerTopKMax);
  std::fill(scores.begin(), scores.end(), 1.0f);
  RunTopK(scores, lengths, stride, 512);
}

TEST_F(IndexerTest, TopKLongRowsSplit) {
  // 262,144 entries (1M tokens) over several CTAs per request, at several grid sizes.
  std::mt19937 rng(21);
  const int64_t stride = 262144;
  const std::vector<int32_t> lengths = {262144, 6145, 262143, 16385, 100000, 6144, 300, 0, 200001, 65536};
  const int64_t batch = static_cast<int64_t>(lengths.size());
  std::vector<float> scores = RandomNormal(rng, static_cast<size_t>(batch * stride));
  const int sms = DeviceSmCount();
  for (int num_ctas : {1, sms, 4 * sms, 64 * static_cast<int>(batch)}) {
    std::vector<int32_t> paths;
    RunTopK(scores, lengths, stride, 512, nullptr, num_ctas, &paths);
    // Continuous scores: the sampled threshold must leave a list of at least k that fits (no
    // whole-row fallback; the shared-memory list is the usual case, the global one ~1%).
    ASSERT_EQ(paths.size(), static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      if (lengths[static_cast<size_t>(b)] > kernels::kIndexerTopKShortRow) {
        const int32_t path = paths[static_cast<size_t>(b)];
        EXPECT_TRUE(path == static_cast<int32_t>(kernels::IndexerTopKPath::kListShared) ||
                    path == static_cast<int32_t>(kernels::IndexerTopKPath::kListGlobal))
            << "request " << b << " (n=" << lengths[static_cast<size_t>(b)] << ") took path " << path
            << " instead of a candidate list";
      }
    }
  }
  RunTopK(scores, lengths, stride, kernels::kIndexerTopKMax);
  RunTopK(scores, lengths, stride, 1);
  // Positional trend (recent entries score higher) with noise: the sample must still cover it.
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t e = 0; e < stride; ++e) scores[static_cast<size_t>(b * stride + e)] += 1e-5f * static_cast<float>(e);
  RunTopK(scores, lengths, stride, 512);
}

TEST_F(IndexerTest, TopKLongRowsTies) {
  std::mt19937 rng(23);
  const int64_t stride = 262144;
  const std::vector<int32_t> lengths = {262144, 262141, 7000, 2049, 513, 512, 511, 131072};
  const int64_t batch = static_cast<int64_t>(lengths.size());
  std::vector<float> scores(static_cast<size_t>(batch * stride));
  // All equal: the lowest entries win (the list overflows: whole-row path).
  std::fill(scores.begin(), scores.end(), -3.5f);
  for (int64_t k : {512, 2048, 1}) RunTopK(scores, lengths, stride, k);
  // Few distinct values.
  for (float& s : scores) s = static_cast<float>(static_cast<int>(rng() % 5)) - 2.0f;
  RunTopK(scores, lengths, stride, 512);
  // Heavy ties at the boundary: 400 clear winners, then 5,000 copies of the next value, the rest
  // below; the top 512 take the 112 lowest-numbered copies.
  std::vector<float> noise = RandomUniform(rng, scores.size(), -1.0f, 0.0f);
  for (int64_t b = 0; b < batch; ++b) {
    float* row = scores.data() + b * stride;
    std::copy(noise.begin() + b * stride, noise.begin() + (b + 1) * stride, row);
    const int64_t n = lengths[static_cast<size_t>(b)];
    for (int64_t i = 0; i < 400 && i < n; ++i) row[(i * 7919) % n] = 2.0f + static_cast<float>(i);
    for (int64_t i = 0; i < 5000 && i < n; ++i) {
      float& v = row[(i * 104729 + 13) % n];
      if (v < 1.0f) v = 1.0f;
    }
  }
  for (int64_t k : {512, 400, 401, 2048}) RunTopK(scores, lengths, stride, k);
  // Signed zeros tie; negative infinities sort last.
  for (size_t i = 0; i < scores.size(); ++i)
    scores[i] = (i % 5 == 0) ? -0.0f : (i % 5 == 1 ? 0.0f : (i % 5 == 2 ? -INFINITY : -1.0f));
  RunTopK(scores, lengths, stride, 512);
}

}  // namespace
}  // namespace peregrine::testing
