// Compressor vs cpu::CompressorStep: entry widths (built for DeepSeek-V4 and the small test
// models' odd ones) x (ratio, overlap) x batch x input dtype, several decode steps per request
// from start positions chosen around block boundaries (state rings start with the same random
// contents on both sides), with and without token offsets. Multi-token calls (prefill
// chunks, several consecutive tokens per request) must leave exactly the state and cache of
// the same tokens fed one call at a time, and match the reference.
#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cuda/ops/compressor_step.h"
#include "gpu_test_util.h"
#include "kernels/common/kv_fp8_row.h"

namespace peregrine::testing {
namespace {

struct CompressorCase {
  int64_t dim;
  int64_t ratio;
  int64_t coff;
  int64_t batch;
  DType input;
};

std::string CaseName(const CompressorCase& c) {
  return "dim=" + std::to_string(c.dim) + " ratio=" + std::to_string(c.ratio) + " coff=" + std::to_string(c.coff) +
         " B=" + std::to_string(c.batch) + " " + std::string(DTypeName(c.input));
}

// Host state of one problem: the rings, the cache and the tables the CPU reference updates.
struct HostState {
  CompressorCase c;
  int64_t width = 0, rows_per_slot = 0, num_slots = 0, rope_dim = 0, page_size = 16, max_pages = 8, num_pages = 0;
  int64_t num_positions = 0;
  std::vector<float> cos, sin, ape, norm, kv_state, gate_state, cache;
  std::vector<int32_t> slots, page_table;

  // The reference fed token rows kv/gate [num_tokens, width]: step t takes each request's
  // t-th token (rows offsets[b] + t, at position positions[b] + t); one CPU call per step.
  void Feed(const std::vector<int32_t>& offsets, const std::vector<int32_t>& positions, const std::vector<float>& kv,
            const std::vector<float>& gate) {
    int32_t max_count = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      max_count = std::max(max_count, offsets[static_cast<size_t>(b + 1)] - offsets[static_cast<size_t>(b)]);
    std::vector<float> kv_step(static_cast<size_t>(c.batch * width)), gate_step(kv_step.size());
    std::vector<int32_t> pos_step(static_cast<size_t>(c.batch));
    for (int32_t t = 0; t < max_count; ++t) {
      for (int64_t b = 0; b < c.batch; ++b) {
        const auto i = static_cast<size_t>(b);
        const bool has_token = offsets[i] + t < offsets[i + 1] && positions[i] >= 0;
        pos_step[i] = has_token ? positions[i] + t : -1;
        const int64_t row = has_token ? offsets[i] + t : 0;
        std::copy_n(kv.begin() + row * width, width, kv_step.begin() + b * width);
        std::copy_n(gate.begin() + row * width, width, gate_step.begin() + b * width);
      }
      cpu::CompressorStepInputs ref;
      ref.kv = kv_step.data();
      ref.gate = gate_step.data();
      ref.ape = ape.data();
      ref.kv_state = kv_state.data();
      ref.gate_state = gate_state.data();
      ref.state_slots = slots.data();
      ref.positions = pos_step.data();
      ref.norm_weight = norm.data();
      ref.rope_cos = cos.data();
      ref.rope_sin = sin.data();
      ref.cache = cache.data();
      ref.page_table = page_table.data();
      ref.batch = c.batch;
      ref.dim = c.dim;
      ref.ratio = c.ratio;
      ref.coff = c.coff;
      ref.rope_dim = rope_dim;
      ref.num_positions = num_positions;
      ref.num_state_slots = num_slots;
      ref.page_size = page_size;
      ref.max_pages = max_pages;
      ref.num_cache_rows = num_pages * page_size;
      cpu::CompressorStep(ref);
    }
  }
};

HostState MakeState(const CompressorCase& c, std::mt19937& rng) {
  HostState s;
  s.c = c;
  s.width = c.coff * c.dim;
  s.rows_per_slot = c.coff * c.ratio;
  s.num_slots = c.batch + 2;
  s.rope_dim = c.dim >= 128 ? 64 : (c.dim >= 32 ? 16 : 8);
  s.num_pages = c.batch * s.max_pages + 3;  // up to 128 entries per request
  s.num_positions = 128 * c.ratio + 64;
  MakeRopeTables(s.num_positions, s.rope_dim, 10000.0, s.cos, s.sin);
  s.ape = RandomNormal(rng, static_cast<size_t>(c.ratio * s.width), 0.5f);
  s.norm = RandomUniform(rng, static_cast<size_t>(c.dim), 0.5f, 1.5f);
  s.kv_state = RandomNormal(rng, static_cast<size_t>(s.num_slots * s.rows_per_slot * s.width));
  s.gate_state = RandomNormal(rng, s.kv_state.size());
  s.cache = RoundedBF16(RandomNormal(rng, static_cast<size_t>(s.num_pages * s.page_size * c.dim)));
  // Slots and pages shuffled so that no request's data sits where its index would put it.
  s.slots.resize(static_cast<size_t>(c.batch));
  for (int64_t b = 0; b < c.batch; ++b) s.slots[static_cast<size_t>(b)] = static_cast<int32_t>((b * 7 + 1) % s.num_slots);
  std::vector<int32_t> pages(static_cast<size_t>(s.num_pages));
  std::iota(pages.begin(), pages.end(), 0);
  std::shuffle(pages.begin(), pages.end(), rng);
  s.page_table.assign(pages.begin(), pages.begin() + c.batch * s.max_pages);
  return s;
}

// Random token rows [num_tokens, width], rounded through bf16 for bf16 inputs.
void MakeTokens(const CompressorCase& c, int64_t num_tokens, std::mt19937& rng, std::vector<float>& kv,
                std::vector<float>& gate) {
  kv = RandomNormal(rng, static_cast<size_t>(num_tokens * c.coff * c.dim));
  gate = RandomNormal(rng, kv.size(), 1.5f);
  if (c.input == DType::kBF16) {
    kv = RoundedBF16(kv);
    gate = RoundedBF16(gate);
  }
}

class CompressorStepTest : public GpuTest {
 protected:
  // Device copy of a HostState's mutable parts and tables.
  struct DeviceState {
    cuda::DeviceBuffer ape, norm, cos, sin, kv_state, gate_state, cache, slots, page_table;
  };

  DeviceState UploadState(const HostState& s) {
    DeviceState d;
    d.ape = Upload(s.ape);
    d.norm = Upload(s.norm);
    d.cos = Upload(s.cos);
    d.sin = Upload(s.sin);
    d.kv_state = Upload(s.kv_state);
    d.gate_state = Upload(s.gate_state);
    d.cache = fp8_ ? Upload(EncodeFp8Rows(s, s.cache)) : Upload(ToBF16(s.cache));
    d.slots = Upload(s.slots);
    d.page_table = Upload(s.page_table);
    return d;
  }

  // With fp8_, the cache holds V4's FP8 rows (kernels/common/kv_fp8_row.h).
  bool fp8_ = false;

  static kernels::KvFp8RowLayout Fp8Layout(const HostState& s) {
    return {static_cast<int>(s.c.dim), static_cast<int>(s.rope_dim)};
  }
  static std::vector<uint8_t> EncodeFp8Rows(const HostState& s, const std::vector<float>& rows) {
    const kernels::KvFp8RowLayout layout = Fp8Layout(s);
    const size_t n = rows.size() / static_cast<size_t>(s.c.dim);
    std::vector<uint8_t> out(n * static_cast<size_t>(layout.row_bytes()));
    for (size_t r = 0; r < n; ++r)
      kernels::KvFp8EncodeRow(rows.data() + r * static_cast<size_t>(s.c.dim), layout,
                              out.data() + r * static_cast<size_t>(layout.row_bytes()));
    return out;
  }
  size_t CacheBytes(const HostState& s) const {
    const size_t rows = s.cache.size() / static_cast<size_t>(s.c.dim);
    return fp8_ ? rows * static_cast<size_t>(Fp8Layout(s).row_bytes()) : s.cache.size() * 2;
  }

  // Arguments over `d` for token rows kv/gate [num_tokens, width] and, when `offsets` is
  // given, their per-request ranges.
  cuda::CompressorStepArgs Args(const HostState& s, const DeviceState& d, const cuda::DeviceBuffer& kv,
                                const cuda::DeviceBuffer& gate, int64_t num_tokens, const cuda::DeviceBuffer& positions,
                                const cuda::DeviceBuffer* offsets) {
    const CompressorCase& c = s.c;
    cuda::CompressorStepArgs a;
    a.kv = View(kv, c.input, {num_tokens, s.width});
    a.gate = View(gate, c.input, {num_tokens, s.width});
    if (offsets != nullptr) a.token_offsets = View(*offsets, DType::kI32, {c.batch + 1});
    a.ape = View(d.ape, DType::kF32, {c.ratio, s.width});
    a.kv_state = View(d.kv_state, DType::kF32, {s.num_slots, s.rows_per_slot, s.width});
    a.gate_state = View(d.gate_state, DType::kF32, {s.num_slots, s.rows_per_slot, s.width});
    a.state_slots = View(d.slots, DType::kI32, {c.batch});
    a.positions = View(positions, DType::kI32, {c.batch});
    a.norm_weight = View(d.norm, DType::kF32, {c.dim});
    a.rope_cos = View(d.cos, DType::kF32, {s.num_positions, s.rope_dim / 2});
    a.rope_sin = View(d.sin, DType::kF32, {s.num_positions, s.rope_dim / 2});
    a.cache = fp8_ ? View(d.cache, DType::kU8, {s.num_pages, s.page_size, Fp8Layout(s).row_bytes()})
                   : View(d.cache, DType::kBF16, {s.num_pages, s.page_size, c.dim});
    a.page_table = View(d.page_table, DType::kI32, {c.batch, s.max_pages});
    a.ratio = c.ratio;
    a.coff = c.coff;
    a.rope_dim = s.rope_dim;
    return a;
  }

  cuda::DeviceBuffer UploadTokens(const CompressorCase& c, const std::vector<float>& v) {
    if (v.empty()) return Poisoned(16);
    return c.input == DType::kBF16 ? Upload(ToBF16(v)) : Upload(v);
  }

  // One call for all the tokens: request b's are rows [offsets[b], offsets[b + 1]).
  void FeedChunk(const HostState& s, const DeviceState& d, const std::vector<int32_t>& offsets,
                 const std::vector<int32_t>& positions, const std::vector<float>& kv, const std::vector<float>& gate) {
    const int64_t num_tokens = offsets.back();
    cuda::DeviceBuffer kv_d = UploadTokens(s.c, kv), gate_d = UploadTokens(s.c, gate);
    cuda::DeviceBuffer offsets_d = Upload(offsets), pos_d = Upload(positions);
    PG_ASSERT_OK(cuda::CompressorStep(Args(s, d, kv_d, gate_d, num_tokens, pos_d, &offsets_d), stream_.get()));
    Sync();
  }

  // The same tokens one decode call per step (no offsets), as FeedChunk's reference.
  void FeedOneByOne(const HostState& s, const DeviceState& d, const std::vector<int32_t>& offsets,
                    const std::vector<int32_t>& positions, const std::vector<float>& kv,
                    const std::vector<float>& gate) {
    const CompressorCase& c = s.c;
    int32_t max_count = 0;
    for (int64_t b = 0; b < c.batch; ++b)
      max_count = std::max(max_count, offsets[static_cast<size_t>(b + 1)] - offsets[static_cast<size_t>(b)]);
    std::vector<float> kv_step(static_cast<size_t>(c.batch * s.width)), gate_step(kv_step.size());
    std::vector<int32_t> pos_step(static_cast<size_t>(c.batch));
    for (int32_t t = 0; t < max_count; ++t) {
      for (int64_t b = 0; b < c.batch; ++b) {
        const auto i = static_cast<size_t>(b);
        const bool has_token = offsets[i] + t < offsets[i + 1] && positions[i] >= 0;
        pos_step[i] = has_token ? positions[i] + t : -1;
        const int64_t row = has_token ? offsets[i] + t : 0;
        std::copy_n(kv.begin() + row * s.width, s.width, kv_step.begin() + b * s.width);
        std::copy_n(gate.begin() + row * s.width, s.width, gate_step.begin() + b * s.width);
      }
      cuda::DeviceBuffer kv_d = UploadTokens(c, kv_step), gate_d = UploadTokens(c, gate_step);
      cuda::DeviceBuffer pos_d = Upload(pos_step);
      PG_ASSERT_OK(cuda::CompressorStep(Args(s, d, kv_d, gate_d, c.batch, pos_d, nullptr), stream_.get()));
      Sync();
    }
  }

  void ExpectMatches(const HostState& s, const DeviceState& d, const std::string& what) {
    EXPECT_TRUE(AllClose(Download<float>(d.kv_state, s.kv_state.size()), s.kv_state, ToleranceFor(DType::kF32),
                         what + " kv_state"));
    EXPECT_TRUE(AllClose(Download<float>(d.gate_state, s.gate_state.size()), s.gate_state, ToleranceFor(DType::kF32),
                         what + " gate_state"));
    if (!fp8_) {
      EXPECT_TRUE(AllClose(DownloadBF16(d.cache, s.cache.size()), s.cache, ToleranceFor(DType::kBF16), what + " cache"));
      return;
    }
    // FP8 rows: each decoded row against the reference's row through the host format. The
    // device's f32 entry differs from the reference's in its last bits, so a value may land
    // one e4m3 step away (and a block's scale one power of two away) where the reference sits
    // on a rounding boundary; nearly all values must be identical.
    const kernels::KvFp8RowLayout layout = Fp8Layout(s);
    const std::vector<uint8_t> bytes = Download<uint8_t>(d.cache, CacheBytes(s));
    const auto dim = static_cast<size_t>(s.c.dim);
    size_t identical = 0, total = 0;
    std::vector<float> got(dim), want(dim);
    for (size_t r = 0; r * dim < s.cache.size(); ++r) {
      kernels::KvFp8DecodeRow(bytes.data() + r * static_cast<size_t>(layout.row_bytes()), layout, got.data());
      // The reference's row through the format (kv_fp8_row_test: the model's round trip).
      std::vector<uint8_t> row(static_cast<size_t>(layout.row_bytes()));
      kernels::KvFp8EncodeRow(s.cache.data() + r * dim, layout, row.data());
      kernels::KvFp8DecodeRow(row.data(), layout, want.data());
      float amax = 0.0f;
      for (float v : want) amax = std::max(amax, std::fabs(v));
      for (size_t i = 0; i < dim; ++i) {
        ++total;
        if (got[i] == want[i]) {
          ++identical;
          continue;
        }
        const float tolerance = std::max(std::fabs(want[i]) * 0.14f, amax * 0.004f);
        ASSERT_LE(std::fabs(got[i] - want[i]), tolerance) << what << " cache row " << r << " value " << i;
      }
    }
    EXPECT_GE(static_cast<double>(identical), 0.97 * static_cast<double>(total)) << what << " cache";
  }

  // Bit-for-bit equal state and cache on two device copies.
  void ExpectIdentical(const HostState& s, const DeviceState& x, const DeviceState& y) {
    EXPECT_TRUE(AllClose(Download<float>(x.kv_state, s.kv_state.size()), Download<float>(y.kv_state, s.kv_state.size()),
                         {0.0, 0.0}, "chunk vs one-by-one kv_state"));
    EXPECT_TRUE(AllClose(Download<float>(x.gate_state, s.gate_state.size()),
                         Download<float>(y.gate_state, s.gate_state.size()), {0.0, 0.0},
                         "chunk vs one-by-one gate_state"));
    EXPECT_TRUE(Download<uint8_t>(x.cache, CacheBytes(s)) == Download<uint8_t>(y.cache, CacheBytes(s)))
        << "chunk vs one-by-one cache";
  }

  // Decode: `steps` single-token calls per request from start positions chosen around block
  // boundaries (first block, just before and after a boundary, deep in the sequence; one
  // request skipped by a negative position). With `with_offsets`, each call passes
  // token_offsets = 0, 1, ..., B (one token per request), which must change nothing.
  void RunDecode(const CompressorCase& c, int steps, bool with_offsets, uint32_t seed) {
    SCOPED_TRACE(CaseName(c) + (with_offsets ? " offsets" : ""));
    std::mt19937 rng(seed);
    HostState s = MakeState(c, rng);
    DeviceState d = UploadState(s);
    std::vector<int32_t> positions(static_cast<size_t>(c.batch));
    const int64_t r = c.ratio;
    const int64_t starts[] = {0, r - 2, 2 * r - 1, r + 1, 5 * r - 3, 9 * r, r * 3 - 1};
    for (int64_t b = 0; b < c.batch; ++b) positions[static_cast<size_t>(b)] = static_cast<int32_t>(starts[b % 7]);
    if (c.batch > 2) positions[2] = -1;
    std::vector<int32_t> offsets(static_cast<size_t>(c.batch + 1));
    std::iota(offsets.begin(), offsets.end(), 0);
    cuda::DeviceBuffer offsets_d = Upload(offsets);
    for (int step = 0; step < steps; ++step) {
      std::vector<float> kv, gate;
      MakeTokens(c, c.batch, rng, kv, gate);
      s.Feed(offsets, positions, kv, gate);
      cuda::DeviceBuffer kv_d = UploadTokens(c, kv), gate_d = UploadTokens(c, gate), pos_d = Upload(positions);
      PG_ASSERT_OK(cuda::CompressorStep(Args(s, d, kv_d, gate_d, c.batch, pos_d, with_offsets ? &offsets_d : nullptr),
                                        stream_.get()));
      Sync();
      for (int32_t& p : positions)
        if (p >= 0) ++p;
    }
    ExpectMatches(s, d, "decode");
  }

  // Prefill: two chunk calls, each request with its own token count (none, one, up to a few
  // blocks), vs the reference and vs the same tokens fed one call at a time on the device.
  void RunChunks(const CompressorCase& c, uint32_t seed) {
    SCOPED_TRACE(CaseName(c) + " chunks");
    std::mt19937 rng(seed);
    HostState s = MakeState(c, rng);
    DeviceState chunked = UploadState(s);
    DeviceState single = UploadState(s);
    const int32_t r = static_cast<int32_t>(c.ratio);
    // Token counts per request, per chunk; positions continue from one chunk to the next.
    const int32_t counts[2][8] = {{0, 1, r - 1, r, 2 * r + 3, 3 * r + 5, 7, 2 * r},
                                  {r + 1, 3, 1, 2 * r - 1, 0, r, 5 * r + 2, 2}};
    const int32_t starts[8] = {0, r - 1, 3, 2 * r, r + 2, 0, 11 * r - 1, 4 * r + 1};
    std::vector<int32_t> positions(static_cast<size_t>(c.batch));
    for (int64_t b = 0; b < c.batch; ++b) positions[static_cast<size_t>(b)] = starts[b % 8];
    if (c.batch > 3) positions[3] = -1;                   // skipped request
    if (c.batch > 5) s.slots[5] = -1;                     // request without a ring: skipped
    if (c.batch > 5) {
      CopyIn(chunked.slots, s.slots);
      CopyIn(single.slots, s.slots);
    }
    for (int chunk = 0; chunk < 2; ++chunk) {
      SCOPED_TRACE("chunk " + std::to_string(chunk));
      std::vector<int32_t> offsets(static_cast<size_t>(c.batch + 1), 0);
      for (int64_t b = 0; b < c.batch; ++b)
        offsets[static_cast<size_t>(b + 1)] = offsets[static_cast<size_t>(b)] + counts[chunk][(b + chunk) % 8];
      std::vector<float> kv, gate;
      MakeTokens(c, offsets.back(), rng, kv, gate);
      s.Feed(offsets, positions, kv, gate);
      FeedChunk(s, chunked, offsets, positions, kv, gate);
      FeedOneByOne(s, single, offsets, positions, kv, gate);
      ExpectMatches(s, chunked, "chunked");
      ExpectIdentical(s, chunked, single);
      for (int64_t b = 0; b < c.batch; ++b) {
        int32_t& p = positions[static_cast<size_t>(b)];
        if (p >= 0) p += offsets[static_cast<size_t>(b + 1)] - offsets[static_cast<size_t>(b)];
      }
    }
  }
};

TEST_F(CompressorStepTest, DecodeSweep) {
  uint32_t seed = 1;
  for (int64_t dim : {24, 32, 64, 128, 512})
    for (auto [ratio, coff] : {std::pair<int64_t, int64_t>{4, 2}, {128, 1}, {8, 1}, {2, 2}})
      for (int64_t batch : {1, 3, 17})
        for (DType input : {DType::kF32, DType::kBF16}) {
          // Enough steps to complete at least one block from every start position.
          const int steps = static_cast<int>(ratio <= 8 ? 3 * ratio + 2 : ratio + 3);
          RunDecode({dim, ratio, coff, batch, input}, steps, /*with_offsets=*/false, seed++);
        }
}

TEST_F(CompressorStepTest, DecodeWithOneTokenOffsets) {
  uint32_t seed = 500;
  for (int64_t dim : {24, 512})
    for (auto [ratio, coff] : {std::pair<int64_t, int64_t>{4, 2}, {8, 1}})
      RunDecode({dim, ratio, coff, 17, DType::kBF16}, static_cast<int>(3 * ratio + 2), /*with_offsets=*/true, seed++);
}

TEST_F(CompressorStepTest, MultiTokenChunks) {
  uint32_t seed = 700;
  for (int64_t dim : {24, 32, 128, 512})
    for (auto [ratio, coff] : {std::pair<int64_t, int64_t>{4, 2}, {128, 1}, {8, 1}, {2, 2}, {1, 1}})
      for (int64_t batch : {1, 8, 17})
        for (DType input : {DType::kF32, DType::kBF16}) {
          if (ratio == 128 && (batch != 8 || dim == 24)) continue;  // long runs: one case each
          RunChunks({dim, ratio, coff, batch, input}, seed++);
        }
}

// V4's FP8 entries (--kv-cache-dtype fp8): the same computation, each entry stored as its FP8
// row (kernels/common/kv_fp8_row.h), at V4's width and the test models' (whole 16-byte parts
// and a partial e4m3 block), in decode and in chunks (which must write the same bytes).
TEST_F(CompressorStepTest, Fp8EntriesAreTheReferenceInV4sFormat) {
  fp8_ = true;
  uint32_t seed = 1300;
  for (int64_t dim : {64, 512, 24})
    for (auto [ratio, coff] : {std::pair<int64_t, int64_t>{4, 2}, {128, 1}, {8, 1}}) {
      RunDecode({dim, ratio, coff, 3, DType::kBF16}, static_cast<int>(ratio <= 8 ? 3 * ratio + 2 : ratio + 3),
                /*with_offsets=*/false, seed++);
      if (ratio != 128) RunChunks({dim, ratio, coff, 8, DType::kF32}, seed++);
    }
}

// Block tables shared through page_table_rows (request b reads table row rows[b]) and
// prefix-cache snapshots: one chunk call per case must leave the state and cache of the same
// call on per-request tables, and every snapshot record must hold the ring rows of the block
// that ended on its boundary, as the reference's rings held them right then.
TEST_F(CompressorStepTest, SharedTablesAndSnapshots) {
  uint32_t seed = 900;
  for (int64_t dim : {24, 128})
    for (auto [ratio, coff] : {std::pair<int64_t, int64_t>{4, 2}, {8, 1}}) {
      // (6 requests: MakeState's slot map (7b + 1) % (B + 2) gives each its own ring.)
      const CompressorCase c{dim, ratio, coff, 6, DType::kBF16};
      SCOPED_TRACE(CaseName(c) + " shared tables");
      std::mt19937 rng(seed++);
      HostState s = MakeState(c, rng);
      const int64_t interval = 2 * ratio;
      // Request b reads row rows[b] of a table with rows in another order.
      const int64_t num_tables = c.batch + 2;
      std::vector<int32_t> rows(static_cast<size_t>(c.batch)), tables(static_cast<size_t>(num_tables * s.max_pages), -1);
      for (int64_t b = 0; b < c.batch; ++b) {
        rows[static_cast<size_t>(b)] = static_cast<int32_t>((b * 3 + 1) % num_tables);
        std::copy_n(s.page_table.begin() + b * s.max_pages, s.max_pages,
                    tables.begin() + rows[static_cast<size_t>(b)] * s.max_pages);
      }
      DeviceState plain = UploadState(s), shared = UploadState(s);
      cuda::DeviceBuffer tables_d = Upload(tables), rows_d = Upload(rows);
      const int32_t iv = static_cast<int32_t>(interval);
      const int32_t counts[6] = {3 * iv + 1, 1, iv, 0, 7, 2 * iv};
      const int32_t starts[6] = {0, iv - 1, iv, 5, 2, 3 * iv - 1};
      std::vector<int32_t> offsets(static_cast<size_t>(c.batch + 1), 0), positions(starts, starts + c.batch);
      for (int64_t b = 0; b < c.batch; ++b) offsets[static_cast<size_t>(b + 1)] = offsets[static_cast<size_t>(b)] + counts[b];
      // Snapshot records: request b's i-th boundary writes record b * 4 + i (i < 4), except
      // request 0's second boundary, which has none.
      const int64_t max_snapshots = 4, num_records = c.batch * max_snapshots;
      std::vector<int32_t> table(static_cast<size_t>(c.batch * max_snapshots));
      for (int64_t i = 0; i < c.batch * max_snapshots; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
      table[1] = -1;
      const int64_t stride = ratio * s.width + 3;  // records need not be packed
      cuda::DeviceBuffer table_d = Upload(table);
      cuda::DeviceBuffer records_kv = Poisoned(static_cast<size_t>(num_records * stride) * 4);
      cuda::DeviceBuffer records_gate = Poisoned(static_cast<size_t>(num_records * stride) * 4);
      std::vector<float> kv, gate;
      MakeTokens(c, offsets.back(), rng, kv, gate);
      cuda::DeviceBuffer kv_d = UploadTokens(c, kv), gate_d = UploadTokens(c, gate);
      cuda::DeviceBuffer offsets_d = Upload(offsets), pos_d = Upload(positions);
      PG_ASSERT_OK(cuda::CompressorStep(Args(s, plain, kv_d, gate_d, offsets.back(), pos_d, &offsets_d), stream_.get()));
      cuda::CompressorStepArgs a = Args(s, shared, kv_d, gate_d, offsets.back(), pos_d, &offsets_d);
      a.page_table = View(tables_d, DType::kI32, {num_tables, s.max_pages});
      a.page_table_rows = View(rows_d, DType::kI32, {c.batch});
      a.snapshot_table = View(table_d, DType::kI32, {c.batch, max_snapshots});
      a.snapshot_kv = records_kv.as<float>();
      a.snapshot_gate = records_gate.as<float>();
      a.snapshot_stride = stride;
      a.num_snapshots = num_records;
      a.snapshot_interval = interval;
      PG_ASSERT_OK(cuda::CompressorStep(a, stream_.get()));
      Sync();
      ExpectIdentical(s, plain, shared);

      // The reference, one token per call, capturing its rings at each boundary.
      std::vector<float> want_kv(static_cast<size_t>(num_records * stride), 0.0f), want_gate(want_kv.size(), 0.0f);
      std::vector<uint8_t> written(static_cast<size_t>(num_records), 0);
      int32_t max_count = *std::max_element(counts, counts + c.batch);
      for (int32_t t = 0; t < max_count; ++t) {
        std::vector<int32_t> step_offsets(static_cast<size_t>(c.batch + 1)), step_positions(static_cast<size_t>(c.batch));
        std::vector<float> step_kv, step_gate;
        for (int64_t b = 0; b < c.batch; ++b) {
          const auto i = static_cast<size_t>(b);
          const bool has = t < counts[b];
          step_positions[i] = has ? positions[i] + t : -1;
          step_offsets[i + 1] = static_cast<int32_t>(b + 1);
          const int64_t row = has ? offsets[i] + t : 0;
          step_kv.insert(step_kv.end(), kv.begin() + row * s.width, kv.begin() + (row + 1) * s.width);
          step_gate.insert(step_gate.end(), gate.begin() + row * s.width, gate.begin() + (row + 1) * s.width);
        }
        s.Feed(step_offsets, step_positions, step_kv, step_gate);
        for (int64_t b = 0; b < c.batch; ++b) {
          const int64_t pos = step_positions[static_cast<size_t>(b)];
          if (pos < 0 || (pos + 1) % interval != 0) continue;
          const int64_t i = (pos + 1) / interval - starts[b] / interval - 1;
          const int32_t record = i < max_snapshots ? table[static_cast<size_t>(b * max_snapshots + i)] : -1;
          if (record < 0) continue;
          const int64_t half = coff == 2 ? (pos / ratio) & 1 : 0;
          const int64_t at = (s.slots[static_cast<size_t>(b)] * s.rows_per_slot + half * ratio) * s.width;
          std::copy_n(s.kv_state.begin() + at, ratio * s.width, want_kv.begin() + record * stride);
          std::copy_n(s.gate_state.begin() + at, ratio * s.width, want_gate.begin() + record * stride);
          written[static_cast<size_t>(record)] = 1;
        }
      }
      const std::vector<float> got_kv = Download<float>(records_kv, want_kv.size());
      const std::vector<float> got_gate = Download<float>(records_gate, want_gate.size());
      int64_t checked = 0;
      for (int64_t r = 0; r < num_records; ++r) {
        if (!written[static_cast<size_t>(r)]) continue;
        ++checked;
        const auto first = static_cast<size_t>(r * stride), n = static_cast<size_t>(ratio * s.width);
        EXPECT_TRUE(AllClose(std::vector<float>(got_kv.begin() + first, got_kv.begin() + first + n),
                             std::vector<float>(want_kv.begin() + first, want_kv.begin() + first + n), {0.0, 0.0},
                             "snapshot kv record " + std::to_string(r)));
        EXPECT_TRUE(AllClose(std::vector<float>(got_gate.begin() + first, got_gate.begin() + first + n),
                             std::vector<float>(want_gate.begin() + first, want_gate.begin() + first + n), {0.0, 0.0},
                             "snapshot gate record " + std::to_string(r)));
      }
      EXPECT_GE(checked, 4);  // request 0 passes 3 boundaries (one without a record), 1 and 2 one each
    }
}

TEST_F(CompressorStepTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(1 << 20);
  cuda::CompressorStepArgs args;
  args.norm_weight = View(buf, DType::kF32, {96});
  args.kv = View(buf, DType::kF32, {1, 96});
  args.gate = View(buf, DType::kF32, {1, 96});
  args.ape = View(buf, DType::kF32, {4, 96});
  args.kv_state = View(buf, DType::kF32, {1, 4, 96});
  args.gate_state = View(buf, DType::kF32, {1, 4, 96});
  args.state_slots = View(buf, DType::kI32, {1});
  args.positions = View(buf, DType::kI32, {1});
  args.rope_cos = View(buf, DType::kF32, {8, 8});
  args.rope_sin = View(buf, DType::kF32, {8, 8});
  args.cache = View(buf, DType::kBF16, {2, 4, 96});
  args.page_table = View(buf, DType::kI32, {1, 2});
  args.ratio = 4;
  args.coff = 1;
  args.rope_dim = 16;
  cuda::CompressorStepArgs a = args;
  a.token_offsets = View(buf, DType::kI32, {1});  // must be [B + 1]
  EXPECT_EQ(cuda::CompressorStep(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = args;
  a.kv = View(buf, DType::kF32, {2, 96});  // without offsets, one row per request
  a.gate = a.kv;
  EXPECT_EQ(cuda::CompressorStep(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = args;
  a.coff = 3;
  EXPECT_EQ(cuda::CompressorStep(a, stream_.get()).code(), StatusCode::kInvalidArgument);
  a = args;
  a.rope_dim = 15;
  EXPECT_EQ(cuda::CompressorStep(a, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
