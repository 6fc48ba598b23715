// Shape-generic sparse attention and indexer scores vs the CPU references: H x D x B sweeps
// over (CSA index lists | HCA all entries | window only) with lengths below, at and above
// the capacities, -1 padding and masked rows, with and without the inverse RoPE; the same
// results as the fast kernels where both are built; indexer heads x dims x lengths with the
// entries past each length checked untouched; one CUDA-graph capture of each op replayed
// with rewritten metadata.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <thread>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/ops/generic_attention.h"
#include "backend/cuda/ops/indexer.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "backend/cuda/stream.h"
#include "gpu_test_util.h"
#include "kernels/common/kv_fp8_row.h"

namespace peregrine::testing {
namespace {

int PoolThreads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 16u)); }

enum class Mode { kIndexed, kAllEntries, kWindowOnly };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kIndexed:
      return "indexed";
    case Mode::kAllEntries:
      return "all-entries";
    case Mode::kWindowOnly:
      return "window-only";
  }
  return "?";
}

// Host copies of one attention problem, shared by the CPU reference and the device runs.
struct Problem {
  int64_t batch = 0, heads = 0, dim = 0;
  int64_t window_rows = 0, window_capacity = 0;
  int64_t num_pages = 0, page_size = 0, max_pages = 0, compressed_capacity = 0;
  int64_t num_positions = 0, rope_dim = 0;
  bool rotate = true;
  Mode mode = Mode::kIndexed;
  std::vector<float> q, window_kv, compressed_kv, sink, cos, sin;
  std::vector<int32_t> window_indices, window_lengths, page_table, compressed_indices, compressed_lengths, positions;

  std::string Name() const {
    return "H=" + std::to_string(heads) + " D=" + std::to_string(dim) + " B=" + std::to_string(batch) + " " +
           ModeName(mode) + (rotate ? "" : " no-rope");
  }
  // Rows per request as the kernels count them (lengths clamped to the capacities).
  std::vector<int64_t> Rows() const {
    std::vector<int64_t> rows(static_cast<size_t>(batch));
    const int64_t compressed_cap = mode == Mode::kIndexed ? compressed_capacity : max_pages * page_size;
    for (int64_t b = 0; b < batch; ++b) {
      const auto i = static_cast<size_t>(b);
      rows[i] = std::clamp<int64_t>(window_lengths[i], 0, window_capacity);
      if (mode != Mode::kWindowOnly) rows[i] += std::clamp<int64_t>(compressed_lengths[i], 0, compressed_cap);
    }
    return rows;
  }
};

constexpr int64_t kWindowCapacity = 128;
constexpr int64_t kIndexCapacity = 256;   // CSA index list length
constexpr int64_t kAllEntriesMax = 300;   // HCA visible entries (max_pages * P rounds it up)

// Request b's lengths cycle through these (offset by b): below, at and above the capacities.
const int32_t kWindowLengths[] = {128, 127, 0, 1, 63, 64, 65, 135, 100, 2, 33, 128};
const int32_t kIndexedLengths[] = {256, 0, 1, 63, 64, 65, 266, 200, 5, 128, 129, 17};
const int32_t kAllEntriesLengths[] = {300, 0, 1, 63, 64, 65, 330, 200, 5, 128, 129, 17};

// A problem with `batch` requests. Physical rows and pages are drawn from small pools (shared
// between requests) so that B = 300 stays small; masking is exercised by a -1 and an
// out-of-range index inside the valid window prefix, the same in the index list, a negative
// page table entry, and out-of-range positions (no rotation).
Problem MakeProblem(int64_t heads, int64_t dim, Mode mode, int64_t batch, uint32_t seed, bool rotate) {
  std::mt19937 rng(seed);
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.dim = dim;
  p.mode = mode;
  p.rotate = rotate;
  p.window_capacity = kWindowCapacity;
  p.window_rows = 3 * kWindowCapacity + 5;
  p.page_size = dim % 64 == 0 ? 64 : 16;
  const int64_t visible = mode == Mode::kIndexed ? 2 * kIndexCapacity + 7 : kAllEntriesMax;
  p.max_pages = (visible + p.page_size - 1) / p.page_size;
  p.num_pages = std::min<int64_t>(batch * p.max_pages, 64) + 2;
  p.compressed_capacity = mode == Mode::kIndexed ? kIndexCapacity : 0;
  p.num_positions = 4096;
  p.rope_dim = std::max<int64_t>(2, std::min<int64_t>(64, dim / 2) / 2 * 2);
  p.q = RoundedBF16(RandomNormal(rng, static_cast<size_t>(batch * heads * dim)));
  p.window_kv = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.window_rows * dim)));
  p.compressed_kv = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.num_pages * p.page_size * dim)));
  p.sink = RandomNormal(rng, static_cast<size_t>(heads));
  MakeRopeTables(p.num_positions, p.rope_dim, 10000.0, p.cos, p.sin);

  p.window_lengths.resize(static_cast<size_t>(batch));
  p.compressed_lengths.resize(static_cast<size_t>(batch));
  const int32_t* compressed = mode == Mode::kIndexed ? kIndexedLengths : kAllEntriesLengths;
  for (int64_t b = 0; b < batch; ++b) {
    p.window_lengths[static_cast<size_t>(b)] = kWindowLengths[(b * 5) % std::size(kWindowLengths)];
    p.compressed_lengths[static_cast<size_t>(b)] = compressed[(b * 7) % std::size(kIndexedLengths)];
  }

  p.window_indices.assign(static_cast<size_t>(batch * p.window_capacity), -1);
  std::vector<int32_t> rows(static_cast<size_t>(p.window_rows));
  std::iota(rows.begin(), rows.end(), 0);
  for (int64_t b = 0; b < batch; ++b) {
    std::shuffle(rows.begin(), rows.end(), rng);
    const int64_t length = std::min<int64_t>(p.window_lengths[static_cast<size_t>(b)], p.window_capacity);
    int32_t* list = p.window_indices.data() + b * p.window_capacity;
    std::copy_n(rows.begin(), length, list);
    if (length > 10) {
      list[3] = -1;
      list[5] = static_cast<int32_t>(p.window_rows + 2);
    }
  }
  std::uniform_int_distribution<int32_t> page(0, static_cast<int32_t>(p.num_pages - 1));
  p.page_table.resize(static_cast<size_t>(batch * p.max_pages));
  for (int32_t& x : p.page_table) x = page(rng);
  if (batch > 4) p.page_table[static_cast<size_t>(4 * p.max_pages + 1)] = -1;
  if (mode == Mode::kIndexed) {
    p.compressed_indices.assign(static_cast<size_t>(batch * p.compressed_capacity), -1);
    std::vector<int32_t> entries(static_cast<size_t>(visible));
    std::iota(entries.begin(), entries.end(), 0);
    for (int64_t b = 0; b < batch; ++b) {
      std::shuffle(entries.begin(), entries.end(), rng);
      const int64_t count = std::min<int64_t>(p.compressed_lengths[static_cast<size_t>(b)], p.compressed_capacity);
      std::sort(entries.begin(), entries.begin() + count);
      int32_t* list = p.compressed_indices.data() + b * p.compressed_capacity;
      std::copy_n(entries.begin(), count, list);
      if (count > 5) {
        list[2] = -1;
        list[4] = static_cast<int32_t>(p.max_pages * p.page_size + 3);
      }
    }
  }
  std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(p.num_positions - 1));
  p.positions.resize(static_cast<size_t>(batch));
  for (int32_t& x : p.positions) x = pos(rng);
  if (batch > 2) {
    p.positions[1] = -1;
    p.positions[2] = static_cast<int32_t>(p.num_positions + 3);
  }
  return p;
}

std::vector<float> Reference(const Problem& p) {
  cpu::ThreadPool pool(PoolThreads());
  cpu::SparseAttentionInputs in;
  in.q = p.q.data();
  in.window_kv = p.window_kv.data();
  in.window_indices = p.window_indices.data();
  in.window_lengths = p.window_lengths.data();
  in.compressed_kv = p.mode == Mode::kWindowOnly ? nullptr : p.compressed_kv.data();
  in.page_table = p.page_table.data();
  in.compressed_indices = p.mode == Mode::kIndexed ? p.compressed_indices.data() : nullptr;
  in.compressed_lengths = p.compressed_lengths.data();
  in.sink = p.sink.data();
  in.positions = p.positions.data();
  in.rope_cos = p.rotate ? p.cos.data() : nullptr;
  in.rope_sin = p.sin.data();
  in.batch = p.batch;
  in.heads = p.heads;
  in.dim = p.dim;
  in.num_window_rows = p.window_rows;
  in.window_capacity = p.window_capacity;
  in.num_compressed_rows = p.num_pages * p.page_size;
  in.page_size = p.page_size;
  in.max_pages = p.max_pages;
  in.compressed_capacity = p.compressed_capacity;
  in.rope_dim = p.rope_dim;
  in.num_positions = p.num_positions;
  in.scale = 1.0f / std::sqrt(static_cast<float>(p.dim));
  std::vector<float> out(static_cast<size_t>(p.batch * p.heads * p.dim));
  cpu::SparseAttentionDecode(pool, in, out.data());
  return out;
}

class GenericAttentionTest : public GpuTest {
 protected:
  // Device copies of a problem and the arguments (without schedule and workspaces).
  struct DeviceProblem {
    cuda::DeviceBuffer q, window_kv, window_indices, window_lengths, compressed_kv, page_table, compressed_indices,
        compressed_lengths, sink, positions, cos, sin, out, page_table_rows;
    cuda::SparseAttentionArgs args;
  };
  // Requests address rows of a shared table (page_table_rows), as block tables do.
  bool shared_tables_ = false;

  DeviceProblem Prepare(const Problem& p) {
    DeviceProblem d;
    d.q = Upload(ToBF16(p.q));
    d.window_kv = Upload(ToBF16(p.window_kv));
    d.window_indices = Upload(p.window_indices);
    d.window_lengths = Upload(p.window_lengths);
    d.compressed_kv = Upload(ToBF16(p.compressed_kv));
    d.page_table = Upload(p.page_table);
    if (p.mode == Mode::kIndexed) d.compressed_indices = Upload(p.compressed_indices);
    d.compressed_lengths = Upload(p.compressed_lengths);
    d.sink = Upload(p.sink);
    d.positions = Upload(p.positions);
    d.cos = Upload(p.cos);
    d.sin = Upload(p.sin);
    d.out = Poisoned(static_cast<size_t>(p.batch * p.heads * p.dim) * 2);
    cuda::SparseAttentionArgs& a = d.args;
    a.q = View(d.q, DType::kBF16, {p.batch, p.heads, p.dim});
    a.window_kv = View(d.window_kv, DType::kBF16, {p.window_rows, p.dim});
    a.window_indices = View(d.window_indices, DType::kI32, {p.batch, p.window_capacity});
    a.window_lengths = View(d.window_lengths, DType::kI32, {p.batch});
    if (p.mode != Mode::kWindowOnly) {
      a.compressed_kv = View(d.compressed_kv, DType::kBF16, {p.num_pages, p.page_size, p.dim});
      a.page_table = View(d.page_table, DType::kI32, {p.batch, p.max_pages});
      if (shared_tables_)
        UploadSharedRows(p.page_table, p.batch, p.max_pages, &d.page_table, &d.page_table_rows, &a.page_table,
                         &a.page_table_rows);
      a.compressed_lengths = View(d.compressed_lengths, DType::kI32, {p.batch});
      if (p.mode == Mode::kIndexed)
        a.compressed_indices = View(d.compressed_indices, DType::kI32, {p.batch, p.compressed_capacity});
    }
    a.sink = View(d.sink, DType::kF32, {p.heads});
    a.positions = View(d.positions, DType::kI32, {p.batch});
    if (p.rotate) {
      a.rope_cos = View(d.cos, DType::kF32, {p.num_positions, p.rope_dim / 2});
      a.rope_sin = View(d.sin, DType::kF32, {p.num_positions, p.rope_dim / 2});
    }
    a.rope_dim = p.rope_dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(p.dim));
    a.out = View(d.out, DType::kBF16, {p.batch, p.heads, p.dim});
    return d;
  }

  std::vector<float> RunGeneric(const Problem& p) {
    DeviceProblem d = Prepare(p);
    const Status s = cuda::SparseAttentionGeneric(d.args, stream_.get());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return DownloadBF16(d.out, static_cast<size_t>(p.batch * p.heads * p.dim));
  }

  // The fast kernel's output for the same problem (a built (H, D) only).
  std::vector<float> RunFast(const Problem& p) {
    DeviceProblem d = Prepare(p);
    const auto layout = cuda::SparseAttentionLayout(DeviceSmCount(), static_cast<int>(p.batch));
    std::vector<int32_t> schedule(static_cast<size_t>(layout.num_ints()));
    const std::vector<int64_t> rows = p.Rows();
    const Status planned = cuda::PlanSparseAttention(rows, layout, schedule);
    EXPECT_TRUE(planned.ok()) << planned.ToString();
    cuda::DeviceBuffer schedule_d = Upload(schedule);
    cuda::DeviceBuffer po = Poisoned(static_cast<size_t>(layout.max_segments * p.heads * p.dim) * 4);
    cuda::DeviceBuffer plse = Poisoned(static_cast<size_t>(layout.max_segments * p.heads) * 4);
    cuda::SparseAttentionArgs a = d.args;
    a.layout = layout;
    a.schedule = View(schedule_d, DType::kI32, {layout.num_ints()});
    a.partial_o = View(po, DType::kF32, {layout.max_segments, p.heads, p.dim});
    a.partial_lse = View(plse, DType::kF32, {layout.max_segments, p.heads});
    const Status s = cuda::SparseAttentionDecode(a, stream_.get());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return DownloadBF16(d.out, static_cast<size_t>(p.batch * p.heads * p.dim));
  }

  void CheckAgainstReference(const Problem& p) {
    SCOPED_TRACE(p.Name());
    const std::vector<float> want = Reference(p);
    EXPECT_TRUE(AllClose(RunGeneric(p), want, ToleranceFor(DType::kBF16), "out"));
  }
};

TEST_F(GenericAttentionTest, SweepHeadsDimsBatches) {
  uint32_t seed = 1;
  for (int64_t heads : {1, 4, 8, 64})
    for (int64_t dim : {24, 32, 128, 512})
      for (int64_t batch : {1, 3, 17, 300}) {
        CheckAgainstReference(MakeProblem(heads, dim, Mode::kIndexed, batch, seed++, /*rotate=*/true));
        CheckAgainstReference(MakeProblem(heads, dim, Mode::kAllEntries, batch, seed++, /*rotate=*/false));
        if (batch <= 17) {
          CheckAgainstReference(MakeProblem(heads, dim, Mode::kWindowOnly, batch, seed++, /*rotate=*/true));
          CheckAgainstReference(MakeProblem(heads, dim, Mode::kIndexed, batch, seed++, /*rotate=*/false));
          CheckAgainstReference(MakeProblem(heads, dim, Mode::kAllEntries, batch, seed++, /*rotate=*/true));
        }
      }
}

TEST_F(GenericAttentionTest, SharedPageTableRows) {
  shared_tables_ = true;
  uint32_t seed = 900;
  for (int64_t batch : {1, 17}) {
    CheckAgainstReference(MakeProblem(8, 64, Mode::kIndexed, batch, seed++, /*rotate=*/true));
    CheckAgainstReference(MakeProblem(4, 32, Mode::kAllEntries, batch, seed++, /*rotate=*/true));
  }
}

TEST_F(GenericAttentionTest, AwkwardDims) {
  // Head dims that take the 4-byte path (D % 8 != 0) and the widest tiles.
  uint32_t seed = 500;
  for (int64_t dim : {2, 6, 10, 66, 200, 1000, 1022, 1024}) {
    CheckAgainstReference(MakeProblem(3, dim, Mode::kIndexed, 5, seed++, /*rotate=*/true));
    CheckAgainstReference(MakeProblem(2, dim, Mode::kAllEntries, 3, seed++, /*rotate=*/true));
  }
}

TEST_F(GenericAttentionTest, MatchesFastKernels) {
  uint32_t seed = 900;
  for (auto [heads, dim] : {std::pair<int64_t, int64_t>{64, 512}, {8, 64}})
    for (int64_t batch : {1, 17, 300})
      for (Mode mode : {Mode::kIndexed, Mode::kAllEntries, Mode::kWindowOnly}) {
        const Problem p = MakeProblem(heads, dim, mode, batch, seed++, /*rotate=*/batch != 17);
        SCOPED_TRACE(p.Name());
        EXPECT_TRUE(AllClose(RunGeneric(p), RunFast(p), ToleranceFor(DType::kBF16), "generic vs fast"));
      }
}

// FP8 entries: read as the bf16 values they dequantise to, so the output is bit for bit the
// one over bf16 entries holding those values (V4's width, the test models', whole and partial
// e4m3 blocks).
TEST_F(GenericAttentionTest, Fp8EntriesReadAsTheirBf16Values) {
  uint32_t seed = 1700;
  for (auto [dim, rope] : {std::pair<int, int>{512, 64}, {24, 8}, {200, 8}, {1024, 64}, {40, 16}})
    for (Mode mode : {Mode::kIndexed, Mode::kAllEntries}) {
      Problem p = MakeProblem(4, dim, mode, 17, seed++, /*rotate=*/true);
      SCOPED_TRACE(p.Name());
      const kernels::KvFp8RowLayout layout{dim, rope};
      const auto width = static_cast<size_t>(dim), row_bytes = static_cast<size_t>(layout.row_bytes());
      const size_t rows = p.compressed_kv.size() / width;
      std::vector<uint8_t> fp8(rows * row_bytes);
      for (size_t r = 0; r < rows; ++r) {
        kernels::KvFp8EncodeRow(p.compressed_kv.data() + r * width, layout, fp8.data() + r * row_bytes);
        kernels::KvFp8DecodeRow(fp8.data() + r * row_bytes, layout, p.compressed_kv.data() + r * width);
      }
      const std::vector<float> over_bf16 = RunGeneric(p);
      DeviceProblem d = Prepare(p);
      cuda::DeviceBuffer fp8_d = Upload(fp8);
      d.args.compressed_kv = View(fp8_d, DType::kU8, {p.num_pages, p.page_size, layout.row_bytes()});
      d.args.entry_rope_dim = rope;
      PG_ASSERT_OK(cuda::SparseAttentionGeneric(d.args, stream_.get()));
      const std::vector<float> got = DownloadBF16(d.out, over_bf16.size());
      EXPECT_TRUE(AllClose(got, over_bf16, {0.0, 0.0}, "FP8 vs bf16 entries"));
      EXPECT_TRUE(AllClose(got, Reference(p), ToleranceFor(DType::kBF16), "out"));
    }
}

TEST_F(GenericAttentionTest, CapturedThenReplayedWithNewMetadata) {
  // Recorded once; lengths, index lists, page tables and positions rewritten between replays.
  Problem p = MakeProblem(4, 128, Mode::kIndexed, 9, 77, /*rotate=*/true);
  DeviceProblem d = Prepare(p);
  ASSERT_TRUE(cuda::Graph::BeginCapture(stream_.get()).ok());
  const Status enqueued = cuda::SparseAttentionGeneric(d.args, stream_.get());
  auto graph = cuda::Graph::EndCapture(stream_.get());
  ASSERT_TRUE(enqueued.ok()) << enqueued.ToString();
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  for (uint32_t replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    const Problem next = MakeProblem(4, 128, Mode::kIndexed, 9, 1000 + replay, /*rotate=*/true);
    // Same tensors (q, caches), new metadata; lengths shifted so that every replay differs.
    p.window_indices = next.window_indices;
    p.page_table = next.page_table;
    p.compressed_indices = next.compressed_indices;
    p.positions = next.positions;
    for (int64_t b = 0; b < p.batch; ++b) {
      const auto i = static_cast<size_t>(b);
      p.window_lengths[i] = kWindowLengths[(b + 3 * replay + 1) % std::size(kWindowLengths)];
      p.compressed_lengths[i] = kIndexedLengths[(b + 5 * replay + 2) % std::size(kIndexedLengths)];
    }
    CopyIn(d.window_indices, p.window_indices);
    CopyIn(d.window_lengths, p.window_lengths);
    CopyIn(d.page_table, p.page_table);
    CopyIn(d.compressed_indices, p.compressed_indices);
    CopyIn(d.compressed_lengths, p.compressed_lengths);
    CopyIn(d.positions, p.positions);
    Poison(d.out);
    PG_ASSERT_OK(graph->Launch(stream_.get()));
    Sync();
    const std::vector<float> got = DownloadBF16(d.out, static_cast<size_t>(p.batch * p.heads * p.dim));
    EXPECT_TRUE(AllClose(got, Reference(p), ToleranceFor(DType::kBF16), "out"));
  }
}

TEST_F(GenericAttentionTest, RejectsBadArguments) {
  const Problem p = MakeProblem(4, 32, Mode::kIndexed, 2, 5, /*rotate=*/true);
  DeviceProblem d = Prepare(p);
  PG_ASSERT_OK(cuda::SparseAttentionGeneric(d.args, stream_.get()));
  cuda::SparseAttentionArgs a = d.args;
  a.q = View(d.q, DType::kBF16, {2, 2, 32});  // H mismatches sink and out
  EXPECT_EQ(cuda::SparseAttentionGeneric(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = d.args;
  a.window_indices.dtype = DType::kI64;
  EXPECT_EQ(cuda::SparseAttentionGeneric(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  // Odd and too-wide head dims (views of large enough buffers).
  cuda::DeviceBuffer big = Poisoned(static_cast<size_t>(2 * 4 * 2048) * 2);
  for (int64_t dim : {31, 1026}) {
    a = d.args;
    a.q = View(big, DType::kBF16, {2, 4, dim});
    a.out = View(big, DType::kBF16, {2, 4, dim});
    a.window_kv = View(big, DType::kBF16, {4, dim});
    a.compressed_kv = View(big, DType::kBF16, {1, 2, dim});
    a.rope_cos = Tensor{};
    a.rope_sin = Tensor{};
    EXPECT_EQ(cuda::SparseAttentionGeneric(a, stream_.get()).code(), StatusCode::kInvalidArgument) << dim;
  }
}

// ---- Indexer scores ----

struct IndexerProblem {
  int64_t batch = 0, heads = 0, dim = 0, page_size = 0, max_pages = 0, num_pages = 0, stride = 0;
  std::vector<float> q, keys, weights;
  std::vector<int32_t> page_table, lengths;
  float scale = 1.0f;
};

IndexerProblem MakeIndexer(int64_t heads, int64_t dim, int64_t page_size, const std::vector<int32_t>& lengths,
                           uint32_t seed) {
  std::mt19937 rng(seed);
  IndexerProblem p;
  p.batch = static_cast<int64_t>(lengths.size());
  p.heads = heads;
  p.dim = dim;
  p.page_size = page_size;
  p.lengths = lengths;
  const int64_t max_len = std::max<int64_t>(1, *std::max_element(lengths.begin(), lengths.end()));
  p.max_pages = (max_len + page_size - 1) / page_size + 2;
  p.num_pages = std::min<int64_t>(p.batch * p.max_pages, 256) + 1;
  p.stride = (max_len + 64 + 3) / 4 * 4;
  p.q = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.batch * heads * dim)));
  p.keys = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.num_pages * page_size * dim)));
  p.weights = RandomNormal(rng, static_cast<size_t>(p.batch * heads), 0.2f);
  std::uniform_int_distribution<int32_t> page(0, static_cast<int32_t>(p.num_pages - 1));
  p.page_table.resize(static_cast<size_t>(p.batch * p.max_pages));
  for (int32_t& x : p.page_table) x = page(rng);
  p.scale = 1.0f / std::sqrt(static_cast<float>(dim));
  return p;
}

// CPU scores; entries the reference does not write stay NaN.
std::vector<float> IndexerReference(const IndexerProblem& p) {
  cpu::ThreadPool pool(PoolThreads());
  cpu::IndexerScoresInputs in;
  in.q = p.q.data();
  in.weights = p.weights.data();
  in.keys = p.keys.data();
  in.page_table = p.page_table.data();
  in.num_entries = p.lengths.data();
  in.batch = p.batch;
  in.heads = p.heads;
  in.dim = p.dim;
  in.page_size = p.page_size;
  in.max_pages = p.max_pages;
  in.scale = p.scale;
  std::vector<float> want(static_cast<size_t>(p.batch * p.stride), std::nanf(""));
  cpu::IndexerScores(pool, in, want.data(), p.stride);
  return want;
}

class GenericIndexerTest : public GpuTest {
 protected:
  struct DeviceIndexer {
    cuda::DeviceBuffer q, keys, weights, page_table, lengths, scores, page_table_rows;
    cuda::IndexerScoresArgs args;
  };
  // Requests address rows of a shared table (page_table_rows), as block tables do.
  bool shared_tables_ = false;

  DeviceIndexer Prepare(const IndexerProblem& p, int num_ctas) {
    DeviceIndexer d;
    d.q = Upload(ToBF16(p.q));
    d.keys = Upload(ToBF16(p.keys));
    d.weights = Upload(p.weights);
    d.page_table = Upload(p.page_table);
    d.lengths = Upload(p.lengths);
    d.scores = Poisoned(static_cast<size_t>(p.batch * p.stride) * 4);
    cuda::IndexerScoresArgs& a = d.args;
    a.q = View(d.q, DType::kBF16, {p.batch, p.heads, p.dim});
    a.weights = View(d.weights, DType::kF32, {p.batch, p.heads});
    a.keys = View(d.keys, DType::kBF16, {p.num_pages, p.page_size, p.dim});
    a.page_table = View(d.page_table, DType::kI32, {p.batch, p.max_pages});
    if (shared_tables_)
      UploadSharedRows(p.page_table, p.batch, p.max_pages, &d.page_table, &d.page_table_rows, &a.page_table,
                       &a.page_table_rows);
    a.num_entries = View(d.lengths, DType::kI32, {p.batch});
    a.scores = View(d.scores, DType::kF32, {p.batch, p.stride});
    a.scale = p.scale;
    a.num_ctas = num_ctas;
    return d;
  }

  // Compares the valid entries with `want` and counts the written ones past each length
  // (the poison is all ones).
  void CheckScores(const IndexerProblem& p, const std::vector<float>& got, const std::vector<float>& want,
                   const std::string& what) {
    std::vector<float> got_valid, want_valid;
    int64_t touched_past_length = 0;
    for (int64_t b = 0; b < p.batch; ++b)
      for (int64_t e = 0; e < p.stride; ++e) {
        const auto i = static_cast<size_t>(b * p.stride + e);
        if (e < p.lengths[static_cast<size_t>(b)]) {
          got_valid.push_back(got[i]);
          want_valid.push_back(want[i]);
        } else {
          uint32_t bits;
          std::memcpy(&bits, &got[i], 4);
          touched_past_length += bits != 0xffffffffu;
        }
      }
    EXPECT_TRUE(AllClose(got_valid, want_valid, {2e-5, 1e-4}, what));
    EXPECT_EQ(touched_past_length, 0) << what << ": entries past a request's length were written";
  }

  std::vector<float> RunGeneric(const IndexerProblem& p, int num_ctas) {
    DeviceIndexer d = Prepare(p, num_ctas);
    const Status s = cuda::IndexerScoresGeneric(d.args, stream_.get());
    EXPECT_TRUE(s.ok()) << s.ToString();
    return Download<float>(d.scores, static_cast<size_t>(p.batch * p.stride));
  }

  void Sweep(const IndexerProblem& p) {
    const std::vector<float> want = IndexerReference(p);
    for (int num_ctas : {4 * DeviceSmCount(), 7, 1}) {
      SCOPED_TRACE("ctas=" + std::to_string(num_ctas));
      CheckScores(p, RunGeneric(p, num_ctas), want, "scores");
    }
  }
};

TEST_F(GenericIndexerTest, SweepHeadsDimsLengths) {
  uint32_t seed = 1;
  const std::vector<int32_t> lengths = {0, 1, 63, 64, 65, 1000};
  for (int64_t heads : {4, 8, 64})
    for (int64_t dim : {24, 64, 128})
      for (int64_t page_size : {64, 16}) {
        SCOPED_TRACE("IH=" + std::to_string(heads) + " Id=" + std::to_string(dim) + " P=" + std::to_string(page_size));
        Sweep(MakeIndexer(heads, dim, page_size, lengths, seed++));
        Sweep(MakeIndexer(heads, dim, page_size, {1000}, seed++));
      }
}

TEST_F(GenericIndexerTest, SharedPageTableRows) {
  shared_tables_ = true;
  Sweep(MakeIndexer(8, 24, 16, {0, 1, 63, 64, 65, 1000}, 950));
  Sweep(MakeIndexer(64, 128, 64, {3, 700, 129}, 951));
}

TEST_F(GenericIndexerTest, LargeBatchAndOddShapes) {
  // Prefill-sized batches (one row per token) and head counts / dims off the warp width.
  std::vector<int32_t> lengths(1500);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<int32_t>((i * 37) % 700);
  uint32_t seed = 300;
  for (auto [heads, dim] : {std::pair<int64_t, int64_t>{4, 24}, {64, 128}, {3, 2}, {24, 30}, {33, 96}}) {
    SCOPED_TRACE("IH=" + std::to_string(heads) + " Id=" + std::to_string(dim));
    Sweep(MakeIndexer(heads, dim, 16, lengths, seed++));
  }
}

TEST_F(GenericIndexerTest, MatchesFastKernel) {
  uint32_t seed = 600;
  for (auto [heads, dim] : {std::pair<int64_t, int64_t>{64, 128}, {8, 64}}) {
    SCOPED_TRACE("IH=" + std::to_string(heads) + " Id=" + std::to_string(dim));
    const IndexerProblem p =
        MakeIndexer(heads, dim, 64, {3, 1000, 2049, 127, 128, 129, 1, 0, 777, 64, 4096, 5, 511, 300, 2, 65, 1999},
                    seed++);
    DeviceIndexer d = Prepare(p, 4 * DeviceSmCount());
    PG_ASSERT_OK(cuda::IndexerScores(d.args, stream_.get()));
    const std::vector<float> fast = Download<float>(d.scores, static_cast<size_t>(p.batch * p.stride));
    CheckScores(p, RunGeneric(p, 4 * DeviceSmCount()), fast, "generic vs fast");
  }
}

TEST_F(GenericIndexerTest, CapturedThenReplayedWithNewMetadata) {
  IndexerProblem p = MakeIndexer(8, 24, 16, {5, 70, 300, 0, 129}, 41);
  DeviceIndexer d = Prepare(p, 4 * DeviceSmCount());
  ASSERT_TRUE(cuda::Graph::BeginCapture(stream_.get()).ok());
  const Status enqueued = cuda::IndexerScoresGeneric(d.args, stream_.get());
  auto graph = cuda::Graph::EndCapture(stream_.get());
  ASSERT_TRUE(enqueued.ok()) << enqueued.ToString();
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  std::mt19937 rng(43);
  std::uniform_int_distribution<int32_t> page(0, static_cast<int32_t>(p.num_pages - 1));
  const std::vector<std::vector<int32_t>> steps = {{300, 0, 1, 64, 65}, {6, 71, 299, 1, 130}, {0, 0, 0, 0, 0}};
  for (size_t step = 0; step < steps.size(); ++step) {
    SCOPED_TRACE("replay " + std::to_string(step));
    p.lengths = steps[step];
    for (int32_t& x : p.page_table) x = page(rng);
    CopyIn(d.lengths, p.lengths);
    CopyIn(d.page_table, p.page_table);
    Poison(d.scores);
    PG_ASSERT_OK(graph->Launch(stream_.get()));
    Sync();
    CheckScores(p, Download<float>(d.scores, static_cast<size_t>(p.batch * p.stride)), IndexerReference(p), "scores");
  }
}

TEST_F(GenericIndexerTest, RejectsBadArguments) {
  const IndexerProblem p = MakeIndexer(4, 24, 16, {5, 9}, 3);
  DeviceIndexer d = Prepare(p, 8);
  PG_ASSERT_OK(cuda::IndexerScoresGeneric(d.args, stream_.get()));
  cuda::IndexerScoresArgs a = d.args;
  a.num_ctas = 0;
  EXPECT_EQ(cuda::IndexerScoresGeneric(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  cuda::DeviceBuffer big = Poisoned(static_cast<size_t>(2 * 512 * 512) * 2);
  a = d.args;  // odd dim
  a.q = View(big, DType::kBF16, {2, 4, 23});
  a.keys = View(big, DType::kBF16, {2, 16, 23});
  EXPECT_EQ(cuda::IndexerScoresGeneric(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = d.args;  // more queries than the shared memory holds
  a.q = View(big, DType::kBF16, {2, 4, 4096});
  a.keys = View(big, DType::kBF16, {2, 16, 4096});
  EXPECT_EQ(cuda::IndexerScoresGeneric(a, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
