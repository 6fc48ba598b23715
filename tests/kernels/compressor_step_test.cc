// Compressor decode step vs cpu::CompressorStep: entry widths x (ratio, overlap) x batch x
// input dtype, several steps per request from start positions chosen around block
// boundaries (state rings start with the same random contents on both sides).
#include <algorithm>
#include <numeric>

#include "backend/cpu/cpu_attention_ops.h"
#include "backend/cuda/ops/compressor_step.h"
#include "gpu_test_util.h"

namespace peregrine::testing {
namespace {

struct CompressorCase {
  int64_t dim;
  int64_t ratio;
  int64_t coff;
  int64_t batch;
  DType input;
  int steps;
};

class CompressorStepTest : public GpuTest {
 protected:
  void Run(const CompressorCase& c, uint32_t seed) {
    SCOPED_TRACE("dim=" + std::to_string(c.dim) + " ratio=" + std::to_string(c.ratio) + " coff=" +
                 std::to_string(c.coff) + " B=" + std::to_string(c.batch) + " " + std::string(DTypeName(c.input)));
    std::mt19937 rng(seed);
    const int64_t width = c.coff * c.dim;
    const int64_t rows_per_slot = c.coff * c.ratio;
    const int64_t num_slots = c.batch + 2;
    const int64_t rope_dim = c.dim >= 128 ? 64 : 16;
    const int64_t page_size = 16;
    const int64_t max_pages = 8;  // up to 128 entries per request
    const int64_t num_pages = c.batch * max_pages + 3;
    const int64_t num_positions = 128 * c.ratio + 64;
    std::vector<float> cos, sin;
    MakeRopeTables(num_positions, rope_dim, 10000.0, cos, sin);

    std::vector<float> ape = RandomNormal(rng, static_cast<size_t>(c.ratio * width), 0.5f);
    std::vector<float> norm = RandomUniform(rng, static_cast<size_t>(c.dim), 0.5f, 1.5f);
    std::vector<float> kv_state = RandomNormal(rng, static_cast<size_t>(num_slots * rows_per_slot * width));
    std::vector<float> gate_state = RandomNormal(rng, kv_state.size());
    std::vector<float> cache = RoundedBF16(RandomNormal(rng, static_cast<size_t>(num_pages * page_size * c.dim)));
    // Slots and pages shuffled so that no request's data sits where its index would put it.
    std::vector<int32_t> slots(static_cast<size_t>(c.batch));
    for (int64_t b = 0; b < c.batch; ++b) slots[static_cast<size_t>(b)] = static_cast<int32_t>((b * 7 + 1) % num_slots);
    std::vector<int32_t> pages(static_cast<size_t>(num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    std::vector<int32_t> page_table(static_cast<size_t>(c.batch * max_pages));
    for (size_t i = 0; i < page_table.size(); ++i) page_table[i] = pages[i];
    // Start positions around block boundaries: first block, just before and after a
    // boundary, deep in the sequence; one request skipped (negative position).
    std::vector<int32_t> positions(static_cast<size_t>(c.batch));
    const int64_t r = c.ratio;
    const int64_t starts[] = {0, r - 2, 2 * r - 1, r + 1, 5 * r - 3, 9 * r, r * 3 - 1};
    for (int64_t b = 0; b < c.batch; ++b) positions[static_cast<size_t>(b)] = static_cast<int32_t>(starts[b % 7]);
    if (c.batch > 2) positions[2] = -1;

    cuda::DeviceBuffer ape_d = Upload(ape), norm_d = Upload(norm), cos_d = Upload(cos), sin_d = Upload(sin);
    cuda::DeviceBuffer kv_state_d = Upload(kv_state), gate_state_d = Upload(gate_state);
    cuda::DeviceBuffer cache_d = Upload(ToBF16(cache));
    cuda::DeviceBuffer slots_d = Upload(slots), table_d = Upload(page_table);
    cuda::DeviceBuffer pos_d = Upload(positions);
    const size_t in_bytes = static_cast<size_t>(c.batch * width) * (c.input == DType::kBF16 ? 2 : 4);
    cuda::DeviceBuffer kv_d = Poisoned(in_bytes), gate_d = Poisoned(in_bytes);

    cuda::CompressorStepArgs args;
    args.kv = View(kv_d, c.input, {c.batch, width});
    args.gate = View(gate_d, c.input, {c.batch, width});
    args.ape = View(ape_d, DType::kF32, {c.ratio, width});
    args.kv_state = View(kv_state_d, DType::kF32, {num_slots, rows_per_slot, width});
    args.gate_state = View(gate_state_d, DType::kF32, {num_slots, rows_per_slot, width});
    args.state_slots = View(slots_d, DType::kI32, {c.batch});
    args.positions = View(pos_d, DType::kI32, {c.batch});
    args.norm_weight = View(norm_d, DType::kF32, {c.dim});
    args.rope_cos = View(cos_d, DType::kF32, {num_positions, rope_dim / 2});
    args.rope_sin = View(sin_d, DType::kF32, {num_positions, rope_dim / 2});
    args.cache = View(cache_d, DType::kBF16, {num_pages, page_size, c.dim});
    args.page_table = View(table_d, DType::kI32, {c.batch, max_pages});
    args.ratio = c.ratio;
    args.coff = c.coff;
    args.rope_dim = rope_dim;

    cpu::CompressorStepInputs ref;
    ref.ape = ape.data();
    ref.kv_state = kv_state.data();
    ref.gate_state = gate_state.data();
    ref.state_slots = slots.data();
    ref.positions = positions.data();
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

    for (int step = 0; step < c.steps; ++step) {
      std::vector<float> kv = RandomNormal(rng, static_cast<size_t>(c.batch * width));
      std::vector<float> gate = RandomNormal(rng, kv.size(), 1.5f);
      if (c.input == DType::kBF16) {
        kv = RoundedBF16(kv);
        gate = RoundedBF16(gate);
        CopyIn(kv_d, ToBF16(kv));
        CopyIn(gate_d, ToBF16(gate));
      } else {
        CopyIn(kv_d, kv);
        CopyIn(gate_d, gate);
      }
      CopyIn(pos_d, positions);
      ref.kv = kv.data();
      ref.gate = gate.data();
      cpu::CompressorStep(ref);
      PG_ASSERT_OK(cuda::CompressorStep(args, stream_.get()));
      for (int32_t& p : positions)
        if (p >= 0) ++p;
    }
    EXPECT_TRUE(AllClose(Download<float>(kv_state_d, kv_state.size()), kv_state, ToleranceFor(DType::kF32), "kv_state"));
    EXPECT_TRUE(
        AllClose(Download<float>(gate_state_d, gate_state.size()), gate_state, ToleranceFor(DType::kF32), "gate_state"));
    EXPECT_TRUE(AllClose(DownloadBF16(cache_d, cache.size()), cache, ToleranceFor(DType::kBF16), "cache"));
  }
};

TEST_F(CompressorStepTest, Sweep) {
  uint32_t seed = 1;
  for (int64_t dim : {64, 128, 512})
    for (auto [ratio, coff] : {std::pair<int64_t, int64_t>{4, 2}, {128, 1}, {8, 1}, {2, 2}})
      for (int64_t batch : {1, 3, 17})
        for (DType input : {DType::kF32, DType::kBF16}) {
          // Enough steps to complete at least one block from every start position.
          const int steps = static_cast<int>(ratio <= 8 ? 3 * ratio + 2 : ratio + 3);
          Run({dim, ratio, coff, batch, input, steps}, seed++);
        }
}

TEST_F(CompressorStepTest, RejectsUnbuiltWidth) {
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
  EXPECT_EQ(cuda::CompressorStep(args, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
