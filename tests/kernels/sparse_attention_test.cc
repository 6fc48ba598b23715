// Sparse sink attention vs cpu::SparseAttentionDecode: every built (H, D) x batch x
// (CSA index lists with -1 padding | HCA all entries | window only) x schedules that keep
// requests whole or split them over many CTAs; lengths below, at and across the 64-row tile
// and the 128-row window.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <numeric>
#include <string>
#include <utility>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/ops/sparse_attention.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "gpu_test_util.h"
#include "kernels/common/kv_fp8_row.h"

namespace peregrine::testing {
namespace {

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

// Host copies of one problem, shared by the CPU reference and the device run.
struct Problem {
  int64_t batch = 0, heads = 0, dim = 0;
  int64_t window_rows = 0, window_capacity = 0;
  int64_t num_pages = 0, page_size = 0, max_pages = 0, compressed_capacity = 0;
  int64_t num_positions = 0, rope_dim = 0;
  bool rotate = true;
  Mode mode = Mode::kIndexed;
  std::vector<float> q, window_kv, compressed_kv, sink, cos, sin;
  std::vector<int32_t> window_indices, window_lengths, page_table, compressed_indices, compressed_lengths, positions;
};

Problem MakeProblem(int64_t heads, int64_t dim, Mode mode, const std::vector<int32_t>& window_lengths,
                    const std::vector<int32_t>& compressed_lengths, uint32_t seed, bool rotate = true) {
  std::mt19937 rng(seed);
  Problem p;
  p.batch = static_cast<int64_t>(window_lengths.size());
  p.heads = heads;
  p.dim = dim;
  p.mode = mode;
  p.rotate = rotate;
  p.window_capacity = 128;
  p.window_rows = p.batch * p.window_capacity + 5;
  p.page_size = 64;
  const int32_t max_len = std::max(1, *std::max_element(compressed_lengths.begin(), compressed_lengths.end()));
  // Index lists pick from a visible range a bit larger than the list.
  const int64_t visible = mode == Mode::kIndexed ? 2 * max_len + 7 : max_len;
  p.max_pages = (visible + p.page_size - 1) / p.page_size + 1;
  p.num_pages = p.batch * p.max_pages + 2;
  p.compressed_capacity = mode == Mode::kIndexed ? std::max<int64_t>(512, max_len) : 0;
  p.num_positions = 4096;
  p.rope_dim = 64;
  p.q = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.batch * heads * dim)));
  p.window_kv = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.window_rows * dim)));
  p.compressed_kv = RoundedBF16(RandomNormal(rng, static_cast<size_t>(p.num_pages * p.page_size * dim)));
  p.sink = RandomNormal(rng, static_cast<size_t>(heads));
  MakeRopeTables(p.num_positions, p.rope_dim, 10000.0, p.cos, p.sin);
  p.window_lengths = window_lengths;
  p.compressed_lengths = compressed_lengths;
  p.window_indices.assign(static_cast<size_t>(p.batch * p.window_capacity), -1);
  std::vector<int32_t> rows(static_cast<size_t>(p.window_rows));
  std::iota(rows.begin(), rows.end(), 0);
  for (int64_t b = 0; b < p.batch; ++b) {
    std::shuffle(rows.begin(), rows.end(), rng);
    for (int32_t r = 0; r < window_lengths[static_cast<size_t>(b)]; ++r)
      p.window_indices[static_cast<size_t>(b * p.window_capacity + r)] = rows[static_cast<size_t>(r)];
    if (window_lengths[static_cast<size_t>(b)] > 10)  // a masked row inside the valid prefix
      p.window_indices[static_cast<size_t>(b * p.window_capacity + 3)] = -1;
  }
  std::vector<int32_t> pages(static_cast<size_t>(p.num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  p.page_table.resize(static_cast<size_t>(p.batch * p.max_pages));
  for (size_t i = 0; i < p.page_table.size(); ++i) p.page_table[i] = pages[i];
  if (mode == Mode::kIndexed) {
    p.compressed_indices.assign(static_cast<size_t>(p.batch * p.compressed_capacity), -1);
    std::vector<int32_t> entries(static_cast<size_t>(visible));
    std::iota(entries.begin(), entries.end(), 0);
    for (int64_t b = 0; b < p.batch; ++b) {
      std::shuffle(entries.begin(), entries.end(), rng);
      const int32_t count = compressed_lengths[static_cast<size_t>(b)];
      std::sort(entries.begin(), entries.begin() + count);
      for (int32_t c = 0; c < count; ++c)
        p.compressed_indices[static_cast<size_t>(b * p.compressed_capacity + c)] = entries[static_cast<size_t>(c)];
    }
  }
  std::uniform_int_distribution<int32_t> pos(0, static_cast<int32_t>(p.num_positions - 1));
  p.positions.resize(static_cast<size_t>(p.batch));
  for (int32_t& x : p.positions) x = pos(rng);
  return p;
}

std::vector<float> Reference(const Problem& p) {
  cpu::ThreadPool pool(2);
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

class SparseAttentionTest : public GpuTest {
 protected:
  // Device copies of a problem plus the launch arguments for a schedule of `num_ctas`.
  struct DeviceProblem {
    cuda::DeviceBuffer q, window_kv, window_indices, window_lengths, compressed_kv, page_table, compressed_indices,
        compressed_lengths, sink, positions, cos, sin, schedule, partial_o, partial_lse, out, page_table_rows,
        compressed_fp8;
    cuda::SparseAttentionArgs args;
  };
  // The output over FP8 entries is the output over bf16 entries holding their decoded values,
  // bit for bit (NaN where that one is NaN), one CTA per request and split ones, and (with
  // `reference`) close to the CPU reference.
  void ExpectFp8AsBf16(const Problem& p, const std::vector<uint8_t>& fp8, const kernels::KvFp8RowLayout& layout,
                       const std::string& what, bool reference = true) {
    const size_t n = static_cast<size_t>(p.batch * p.heads * p.dim);
    const std::vector<float> want = reference ? Reference(p) : std::vector<float>();
    for (int num_ctas : {DeviceSmCount(), 7}) {
      SCOPED_TRACE("H=" + std::to_string(p.heads) + " D=" + std::to_string(p.dim) + " " + what +
                   " ctas=" + std::to_string(num_ctas));
      DeviceProblem bf16 = Prepare(p, num_ctas, static_cast<int>(p.batch));
      PG_ASSERT_OK(cuda::SparseAttentionDecode(bf16.args, stream_.get()));
      DeviceProblem f8 = Prepare(p, num_ctas, static_cast<int>(p.batch));
      f8.compressed_fp8 = Upload(fp8);
      f8.args.compressed_kv = View(f8.compressed_fp8, DType::kU8, {p.num_pages, p.page_size, layout.row_bytes()});
      f8.args.entry_rope_dim = layout.rope_dim;
      PG_ASSERT_OK(cuda::SparseAttentionDecode(f8.args, stream_.get()));
      const std::vector<uint16_t> a = Download<uint16_t>(f8.out, n), b = Download<uint16_t>(bf16.out, n);
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        const bool nan_a = (a[i] & 0x7fff) > 0x7f80, nan_b = (b[i] & 0x7fff) > 0x7f80;
        differ += (nan_a != nan_b || (!nan_a && a[i] != b[i])) ? 1 : 0;
      }
      EXPECT_EQ(differ, 0u) << "FP8 vs bf16 entries";
      if (reference) {
        EXPECT_TRUE(AllClose(DownloadBF16(f8.out, n), want, ToleranceFor(DType::kBF16), "out"));
      }
    }
  }

  // Requests address rows of a shared table (page_table_rows), as block tables do.
  bool shared_tables_ = false;

  DeviceProblem Prepare(const Problem& p, int num_ctas, int max_batch) {
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
    const kernels::SparseAttentionScheduleLayout layout = cuda::SparseAttentionLayout(num_ctas, max_batch);
    d.schedule = Poisoned(static_cast<size_t>(layout.num_ints()) * 4, 0xab);
    d.partial_o = Poisoned(static_cast<size_t>(layout.max_segments * p.heads * p.dim) * 4);
    d.partial_lse = Poisoned(static_cast<size_t>(layout.max_segments * p.heads) * 4);
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
    a.layout = layout;
    a.schedule = View(d.schedule, DType::kI32, {layout.num_ints()});
    a.partial_o = View(d.partial_o, DType::kF32, {layout.max_segments, p.heads, p.dim});
    a.partial_lse = View(d.partial_lse, DType::kF32, {layout.max_segments, p.heads});
    a.out = View(d.out, DType::kBF16, {p.batch, p.heads, p.dim});
    Plan(p, d);
    return d;
  }

  // Rows per request as the device lengths say, planned and uploaded into the schedule.
  void Plan(const Problem& p, DeviceProblem& d) {
    std::vector<int64_t> rows(static_cast<size_t>(p.batch));
    for (int64_t b = 0; b < p.batch; ++b)
      rows[static_cast<size_t>(b)] = p.window_lengths[static_cast<size_t>(b)] +
                                     (p.mode == Mode::kWindowOnly ? 0 : p.compressed_lengths[static_cast<size_t>(b)]);
    std::vector<int32_t> schedule(static_cast<size_t>(d.args.layout.num_ints()));
    PG_ASSERT_OK(cuda::PlanSparseAttention(rows, d.args.layout, schedule));
    CopyIn(d.schedule, schedule);
  }

  void Check(const Problem& p, const std::vector<float>& want, int num_ctas) {
    SCOPED_TRACE(std::string("H=") + std::to_string(p.heads) + " D=" + std::to_string(p.dim) + " B=" +
                 std::to_string(p.batch) + " " + ModeName(p.mode) + " ctas=" + std::to_string(num_ctas) +
                 (p.rotate ? "" : " no-rope"));
    DeviceProblem d = Prepare(p, num_ctas, static_cast<int>(p.batch) + 3);
    PG_ASSERT_OK(cuda::SparseAttentionDecode(d.args, stream_.get()));
    const std::vector<float> got = DownloadBF16(d.out, want.size());
    EXPECT_TRUE(AllClose(got, want, ToleranceFor(DType::kBF16), "out"));
  }

  void Sweep(const Problem& p) {
    const std::vector<float> want = Reference(p);
    for (int num_ctas : {DeviceSmCount(), 7, 1}) Check(p, want, num_ctas);
  }
};

TEST_F(SparseAttentionTest, ConfigsModesAndSchedules) {
  uint32_t seed = 1;
  const std::vector<std::vector<int32_t>> windows = {
      {128}, {1, 64, 65}, {128, 127, 0, 1, 63, 64, 65, 128, 100, 2, 128, 128, 3, 128, 90, 128, 5}};
  const std::vector<std::vector<int32_t>> indexed = {
      {512}, {0, 64, 511}, {512, 1, 0, 63, 64, 65, 512, 200, 2, 512, 500, 0, 128, 129, 511, 3, 300}};
  const std::vector<std::vector<int32_t>> all_entries = {
      {1000}, {0, 65, 300}, {1, 2, 0, 63, 64, 65, 127, 128, 129, 2049, 8, 700, 0, 33, 1000, 16, 4}};
  for (const auto& config : kernels::kSparseAttentionConfigs) {
    for (size_t i = 0; i < windows.size(); ++i) {
      Sweep(MakeProblem(config.heads, config.head_dim, Mode::kIndexed, windows[i], indexed[i], seed++));
      Sweep(MakeProblem(config.heads, config.head_dim, Mode::kAllEntries, windows[i], all_entries[i], seed++));
      Sweep(MakeProblem(config.heads, config.head_dim, Mode::kWindowOnly, windows[i], indexed[i], seed++));
    }
  }
}

TEST_F(SparseAttentionTest, LongHcaListSplitOverEverySm) {
  // A 1M-token HCA layer at batch 1: 128 window rows + 8192 entries over all SMs.
  const Problem p = MakeProblem(64, 512, Mode::kAllEntries, {128}, {8192}, 99);
  Sweep(p);
}

TEST_F(SparseAttentionTest, SharedPageTableRows) {
  shared_tables_ = true;
  for (const auto& config : kernels::kSparseAttentionConfigs) {
    Sweep(MakeProblem(config.heads, config.head_dim, Mode::kIndexed, {128, 1, 64, 65}, {512, 0, 63, 300}, 31));
    Sweep(MakeProblem(config.heads, config.head_dim, Mode::kAllEntries, {128, 5, 127}, {1000, 2, 129}, 32));
  }
}

TEST_F(SparseAttentionTest, WithoutRope) {
  const Problem p = MakeProblem(64, 512, Mode::kIndexed, {128, 5, 64}, {512, 70, 0}, 123, /*rotate=*/false);
  Sweep(p);
}

// FP8 entries (--kv-cache-dtype fp8): p's compressed rows encoded in V4's format, `edit`
// applied to each row's bytes, and p's rows replaced by the values the bytes decode to.
std::vector<uint8_t> EncodeFp8Entries(Problem& p, const kernels::KvFp8RowLayout& layout,
                                      const std::function<void(size_t, uint8_t*)>& edit) {
  const auto dim = static_cast<size_t>(p.dim), row_bytes = static_cast<size_t>(layout.row_bytes());
  const size_t rows = p.compressed_kv.size() / dim;
  std::vector<uint8_t> fp8(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    kernels::KvFp8EncodeRow(p.compressed_kv.data() + r * dim, layout, fp8.data() + r * row_bytes);
    edit(r, fp8.data() + r * row_bytes);
    kernels::KvFp8DecodeRow(fp8.data() + r * row_bytes, layout, p.compressed_kv.data() + r * dim);
  }
  return fp8;
}

// Read as the bf16 values they decode to, so the output is bit for bit the one over bf16
// entries holding those values (NaN where that one is NaN), for every built (H, D), index
// lists and all entries, one CTA per request and split ones.
TEST_F(SparseAttentionTest, Fp8EntriesReadAsTheirBf16Values) {
  uint32_t seed = 2000;
  for (const auto& config : kernels::kSparseAttentionConfigs) {
    // V4's rope width, and at D = 64 one whose e4m3 part (40) ends mid 16-byte chunk
    const std::vector<int> rope_dims = config.head_dim >= 512 ? std::vector<int>{64} : std::vector<int>{16, 24};
    for (const auto& [mode, rope_dim] : std::vector<std::pair<Mode, int>>{
             {Mode::kIndexed, rope_dims.front()}, {Mode::kAllEntries, rope_dims.front()},
             {Mode::kIndexed, rope_dims.back()}}) {
      const std::vector<int32_t> lengths =
          mode == Mode::kIndexed ? std::vector<int32_t>{512, 1, 0, 63, 300} : std::vector<int32_t>{1000, 2, 0, 65, 129};
      Problem p = MakeProblem(config.heads, config.head_dim, mode, {128, 1, 64, 65, 0}, lengths, seed++);
      const auto dim = static_cast<size_t>(p.dim);
      for (size_t i = 0; i < p.compressed_kv.size(); ++i) p.compressed_kv[i] *= static_cast<float>(1 + i / dim % 5);
      const kernels::KvFp8RowLayout layout{static_cast<int>(p.dim), rope_dim};
      const std::vector<uint8_t> fp8 = EncodeFp8Entries(p, layout, [](size_t, uint8_t*) {});
      ExpectFp8AsBf16(p, fp8, layout, ModeName(mode) + std::string(" rope=") + std::to_string(rope_dim));
    }
  }
}

// Every e4m3 code, subnormals and both NaNs included, under scales from 2^-117 to 2^13, each
// widened to the bf16 the format decodes it to. A request over one entry with no sink weight
// returns that entry, so each decoded value reaches the output as it is.
TEST_F(SparseAttentionTest, Fp8EntriesDecodeEveryCode) {
  const std::vector<int32_t> windows(64, 0), entries(64, 1);
  Problem p = MakeProblem(8, 512, Mode::kAllEntries, windows, entries, 4242, /*rotate=*/false);
  for (float& s : p.sink) s = -1e30f;
  const kernels::KvFp8RowLayout layout{512, 64};
  const uint8_t scales[] = {10, 60, 100, 110, 120, 127, 128, 134, 135, 140};
  // Request 1's entry (its first page's first row) holds the NaN codes.
  const size_t nan_row = static_cast<size_t>(p.page_table[static_cast<size_t>(p.max_pages)] * p.page_size);
  const std::vector<uint8_t> fp8 = EncodeFp8Entries(p, layout, [&](size_t r, uint8_t* row) {
    for (int i = 0; i < layout.nope(); ++i) {
      const auto code = static_cast<uint8_t>((static_cast<size_t>(i) + 3 * r) % 256);
      row[i] = (code & 0x7f) == 0x7f && r != nan_row ? 0x7e : code;  // NaN codes in one entry only
    }
    for (int b = 0; b < layout.blocks(); ++b)
      row[layout.scale_offset() + b] = scales[(r + static_cast<size_t>(b)) % std::size(scales)];
  });
  ExpectFp8AsBf16(p, fp8, layout, "every code", /*reference=*/false);  // checked value by value below
  // The decoded values themselves, NaN for the entry that holds NaN codes.
  DeviceProblem f8 = Prepare(p, DeviceSmCount(), static_cast<int>(p.batch));
  f8.compressed_fp8 = Upload(fp8);
  f8.args.compressed_kv = View(f8.compressed_fp8, DType::kU8, {p.num_pages, p.page_size, layout.row_bytes()});
  f8.args.entry_rope_dim = layout.rope_dim;
  PG_ASSERT_OK(cuda::SparseAttentionDecode(f8.args, stream_.get()));
  const std::vector<float> got = DownloadBF16(f8.out, static_cast<size_t>(p.batch * p.heads * p.dim));
  size_t wrong = 0, nans = 0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const size_t row = static_cast<size_t>(p.page_table[static_cast<size_t>(b * p.max_pages)] * p.page_size);
    for (int64_t h = 0; h < p.heads; ++h) {
      for (int64_t d = 0; d < p.dim; ++d) {
        const float x = got[static_cast<size_t>((b * p.heads + h) * p.dim + d)];
        const float want = p.compressed_kv[row * static_cast<size_t>(p.dim) + static_cast<size_t>(d)];
        if (row == nan_row) {
          nans += std::isnan(x) ? 1 : 0;
        } else if (!(x == want)) {
          ++wrong;
        }
      }
    }
  }
  EXPECT_EQ(wrong, 0u) << "decoded values differ from the format's";
  EXPECT_EQ(nans, static_cast<size_t>(p.heads * p.dim)) << "an entry with NaN codes must read as NaN";
}

TEST_F(SparseAttentionTest, RejectsBadArguments) {
  const Problem p = MakeProblem(64, 512, Mode::kIndexed, {4}, {4}, 5);
  DeviceProblem d = Prepare(p, 4, 1);
  cuda::SparseAttentionArgs a = d.args;
  a.q = View(d.q, DType::kBF16, {1, 32, 512});  // H mismatches sink and out
  EXPECT_EQ(cuda::SparseAttentionDecode(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = d.args;
  a.layout = cuda::SparseAttentionLayout(4, 0);  // batch over the layout
  EXPECT_EQ(cuda::SparseAttentionDecode(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = d.args;
  a.window_indices.dtype = DType::kI64;
  EXPECT_EQ(cuda::SparseAttentionDecode(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  // FP8 entries: rows of the layout's width, rope and e4m3 widths in multiples of 8.
  a = d.args;
  a.compressed_kv = View(d.compressed_kv, DType::kU8, {p.num_pages, p.page_size, 592});
  a.entry_rope_dim = 64;
  EXPECT_EQ(cuda::SparseAttentionDecode(a, stream_.get()).code(), StatusCode::kOk);
  Sync();
  a.entry_rope_dim = 60;
  EXPECT_EQ(cuda::SparseAttentionDecode(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a.entry_rope_dim = 64;
  a.compressed_kv = View(d.compressed_kv, DType::kU8, {p.num_pages, p.page_size, 584});
  EXPECT_EQ(cuda::SparseAttentionDecode(a, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
