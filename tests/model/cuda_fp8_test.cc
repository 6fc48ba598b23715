// DeepSeek-V4 on the CUDA backend with FP8 dense projections (WeightLoadOptions::dense_format
// = kFP8) against the CPU backend on the same weights. Skipped without a GPU.
//
// The weights: the demo model's shapes (every dense projection's M and K a multiple of 128, so
// all of wq_a, wq_b, wkv, wo_b, indexer wq_b and the shared expert are FP8; the committed
// tiny fixtures have D = 64 and would keep them all bf16) with deterministic synthetic
// values, the dense projections quantised the way the release stores them (e4m3, one
// power-of-two scale per 128x128 block). A checkpoint wrapper gives the CPU backend those
// values dequantised (exact in f32) and the CUDA loader either the FP8 codes and scales
// themselves (as an official FP8 checkpoint does) or the same values as plain floats (it
// then quantises them at load). Both backends therefore multiply by identical weights. The
// learned routing picks every expert and the indexer keeps every entry, so no discrete choice
// can flip between the f32 CPU forward and the bf16 device forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "cuda_model_util.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/demo_model.h"
#include "model/deepseek_v4/model.h"
#include "model/synthetic_checkpoint.h"

namespace peregrine::deepseek_v4::cuda {
namespace {

using testing::StepChunk;
using testing::RelativeL2;

constexpr int64_t kBlock = 128;
constexpr uint64_t kSeed = 77;

// Decode-sized steps (<= 64 rows: W8A16, bf16 activations, the weights exact): only bf16
// activations and KV differ from the CPU's f32, the same bound as the bf16 model's
// (cuda_parity_test: measured 1.3e-2 to 3.5e-2 there).
constexpr double kW8A16Tolerance = 5e-2;
// A prefill step above 64 rows goes through cuBLASLt, which also rounds every dense
// projection's input to e4m3 (3 mantissa bits, ~2-3% RMS per projection input, through
// 4 layers x 7 projections). Not measured yet; the bound is a guess that still catches a
// wrong layout or scale (those give O(1) errors).
constexpr double kPrefillFp8ActivationTolerance = 0.2;
// The same device model with other chunkings (all <= 64 rows: W8A16, batch-invariant per
// row): only the attention work split and bf16 GEMMs' algorithm choice differ.
constexpr double kChunkingTolerance = 1e-2;

bool IsDenseFp8(std::string_view name, const Shape& shape) {
  static constexpr std::array<std::string_view, 8> kSuffixes = {
      "attn.wq_a.weight",           "attn.wq_b.weight",           "attn.wkv.weight",
      "attn.wo_b.weight",           "indexer.wq_b.weight",        "shared_experts.w1.weight",
      "shared_experts.w2.weight",   "shared_experts.w3.weight"};
  if (shape.ndim() != 2 || shape[0] % kBlock != 0 || shape[1] % kBlock != 0) return false;
  return std::any_of(kSuffixes.begin(), kSuffixes.end(), [&](std::string_view s) { return name.ends_with(s); });
}

// The release's rule: s = the smallest power of two with max(amax, 1e-4) <= 448 s per block,
// codes e4m3(w / s).
Fp8BlockTensor Quantize(const float* w, int64_t rows, int64_t cols) {
  const int64_t rb = rows / kBlock, cb = cols / kBlock;
  std::shared_ptr<uint8_t[]> codes(new uint8_t[static_cast<size_t>(rows * cols)]);
  std::shared_ptr<float[]> scales(new float[static_cast<size_t>(rb * cb)]);
  for (int64_t br = 0; br < rb; ++br)
    for (int64_t bc = 0; bc < cb; ++bc) {
      float amax = 1e-4f;
      for (int64_t r = br * kBlock; r < (br + 1) * kBlock; ++r)
        for (int64_t c = bc * kBlock; c < (bc + 1) * kBlock; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
      float s = std::ldexp(1.0f, -60);
      while (448.0f * s < amax) s *= 2.0f;
      scales[static_cast<size_t>(br * cb + bc)] = s;
      for (int64_t r = br * kBlock; r < (br + 1) * kBlock; ++r)
        for (int64_t c = bc * kBlock; c < (bc + 1) * kBlock; ++c)
          codes[static_cast<size_t>(r * cols + c)] = F32ToE4M3(w[r * cols + c] / s);
    }
  Fp8BlockTensor t;
  t.codes = HostTensor{Tensor::Contiguous(codes.get(), DType::kF8E4M3, {rows, cols}), codes};
  t.scales = HostTensor{Tensor::Contiguous(scales.get(), DType::kF32, {rb, cb}), scales};
  return t;
}

// Synthetic weights with the dense projections stored as FP8: ReadF32 dequantises them
// (what the CPU backend sees), ReadFp8Blocks returns the codes when `expose_fp8`.
class Fp8DenseCheckpoint final : public Checkpoint {
 public:
  Fp8DenseCheckpoint(const ModelConfig& config, bool expose_fp8)
      : base_(MakeSyntheticCheckpoint(config, kSeed)), expose_fp8_(expose_fp8) {}

  bool Has(std::string_view name) const override { return base_->Has(name); }
  Result<HostTensor> ReadF32(std::string_view name, const Shape& expected) const override {
    PG_ASSIGN_OR_RETURN(HostTensor t, base_->ReadF32(name, expected));
    if (!IsDenseFp8(name, expected)) return t;
    const Fp8BlockTensor q = Quantize(t.f32(), expected[0], expected[1]);
    std::shared_ptr<float[]> out(new float[static_cast<size_t>(expected.numel())]);
    const int64_t cols = expected[1], cb = cols / kBlock;
    for (int64_t i = 0; i < expected.numel(); ++i)
      out[static_cast<size_t>(i)] = E4M3ToF32(q.codes.view.as<const uint8_t>()[i]) *
                                    q.scales.f32()[(i / cols) / kBlock * cb + (i % cols) / kBlock];
    return HostTensor{Tensor::Contiguous(out.get(), DType::kF32, expected), out};
  }
  Result<std::optional<Fp8BlockTensor>> ReadFp8Blocks(std::string_view name, const Shape& expected) const override {
    if (!expose_fp8_ || !IsDenseFp8(name, expected)) return std::optional<Fp8BlockTensor>();
    PG_ASSIGN_OR_RETURN(HostTensor t, base_->ReadF32(name, expected));
    return std::optional<Fp8BlockTensor>(Quantize(t.f32(), expected[0], expected[1]));
  }
  Result<HostTensor> ReadI64(std::string_view name, const Shape& expected) const override {
    return base_->ReadI64(name, expected);
  }
  Result<Shape> LogicalShape(std::string_view name) const override { return base_->LogicalShape(name); }
  std::vector<std::string> CanonicalNames() const override { return base_->CanonicalNames(); }
  uint64_t TotalBytes() const override { return base_->TotalBytes(); }

 private:
  std::unique_ptr<Checkpoint> base_;
  bool expose_fp8_;
};

ModelConfig TestConfig() {
  ModelConfig c = DemoModelConfig();
  c.vocab_size = 512;
  c.num_experts = 4;
  c.num_experts_per_tok = 4;  // learned routing takes every expert: nothing to flip
  c.index_topk = 2048;        // above every entry count here: the indexer keeps them all
  return c;
}

std::vector<int32_t> Prompt(int64_t n, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % vocab);
  return ids;
}

class CudaFp8DenseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    config_ = TestConfig();
    prompt_ = Prompt(200, config_.vocab_size);
  }

  std::unique_ptr<testing::SlotModel> MakeCuda(const Checkpoint& checkpoint, DenseFormat format) {
    testing::SlotModelOptions o;
    o.num_slots = 4;
    o.max_tokens = 256;
    o.max_context = 1024;
    o.max_logit_rows = 256;
    o.weights.dense_format = format;
    auto model = testing::SlotModel::Create(config_, checkpoint, o);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  // Prefills the prompt into `slot` in chunks of `chunk`; logits of every token [T, V].
  std::vector<float> Prefill(testing::SlotModel& model, int32_t slot, int64_t chunk) {
    return testing::PrefillLogits(model, slot, prompt_, chunk);
  }

  std::vector<float> CpuPrefill() {
    auto cpu = Model::Create(config_, std::make_unique<Fp8DenseCheckpoint>(config_, false), 2);
    EXPECT_TRUE(cpu.ok()) << cpu.status().ToString();
    if (!cpu.ok()) return {};
    SequenceState state = (*cpu)->NewSequence();
    std::vector<float> logits;
    EXPECT_TRUE((*cpu)->Forward(state, prompt_, /*all_logits=*/true, &logits).ok());
    return logits;
  }

  ModelConfig config_;
  std::vector<int32_t> prompt_;
};

// The FP8 bytes read from the checkpoint and the same values quantised at load give the same
// device weights up to a power of two per block (codes x 2, scale / 2), which the kernels
// scale out exactly: identical logits. The FP8 model holds fewer bytes than the bf16 one.
TEST_F(CudaFp8DenseTest, CheckpointFp8EqualsQuantisedAtLoad) {
  const Fp8DenseCheckpoint official(config_, true), plain(config_, false);
  auto from_fp8 = MakeCuda(official, DenseFormat::kFP8);
  auto at_load = MakeCuda(plain, DenseFormat::kFP8);
  auto bf16 = MakeCuda(plain, DenseFormat::kBF16);
  ASSERT_TRUE(from_fp8 && at_load && bf16);
  EXPECT_LT(from_fp8->weight_bytes(), bf16->weight_bytes());
  std::printf("weights: %.2f MB fp8 dense, %.2f MB bf16 dense\n", from_fp8->weight_bytes() / 1e6,
              bf16->weight_bytes() / 1e6);
  for (int64_t chunk : {16, 200}) {
    const std::vector<float> a = Prefill(*from_fp8, 0, chunk), b = Prefill(*at_load, 0, chunk);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(a == b) << "chunk " << chunk << ": rel L2 "
                        << RelativeL2(a.data(), b.data(), static_cast<int64_t>(a.size()));
  }
}

// Against the CPU backend on identical weights: decode-sized chunks (W8A16) at the bf16
// bound; the whole 200-token prompt in one step (cuBLASLt, e4m3 activations) at the looser
// one; then batched decode steps (graph buckets 1, 2, 4) at the bf16 bound.
TEST_F(CudaFp8DenseTest, MatchesCpuBackend) {
  const Fp8DenseCheckpoint official(config_, true);
  auto model = MakeCuda(official, DenseFormat::kFP8);
  ASSERT_TRUE(model);
  const std::vector<float> want = CpuPrefill();
  ASSERT_FALSE(want.empty());

  const std::vector<float> chunked = Prefill(*model, 0, 64);
  ASSERT_EQ(chunked.size(), want.size());
  const double err_chunked = RelativeL2(chunked.data(), want.data(), static_cast<int64_t>(want.size()));
  std::printf("fp8 dense, prefill in chunks of 64 (W8A16) vs CPU: rel L2 %.3e\n", err_chunked);
  EXPECT_LE(err_chunked, kW8A16Tolerance);

  const std::vector<float> whole = Prefill(*model, 1, static_cast<int64_t>(prompt_.size()));
  ASSERT_EQ(whole.size(), want.size());
  const double err_whole = RelativeL2(whole.data(), want.data(), static_cast<int64_t>(want.size()));
  std::printf("fp8 dense, prefill in one 200-row step (cuBLASLt, e4m3 activations) vs CPU: rel L2 %.3e\n", err_whole);
  EXPECT_LE(err_whole, kPrefillFp8ActivationTolerance);

  // Batched decode after prefills of different lengths (prefilled in W8A16-sized steps).
  auto cpu = Model::Create(config_, std::make_unique<Fp8DenseCheckpoint>(config_, false), 2);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(model->EnableGraphs(4).ok());
  const int64_t lengths[] = {3, 60, 129};
  const std::vector<double> errors =
      testing::BatchedDecodeErrors(*model, **cpu, prompt_, lengths, /*first_slot=*/1, /*chunk=*/64);
  ASSERT_FALSE(errors.empty());
  for (size_t step = 0; step < errors.size(); ++step)
    EXPECT_LE(errors[step], kW8A16Tolerance) << "step " << step << " batch " << 1 + step % 3;
  const double worst = *std::max_element(errors.begin(), errors.end());
  std::printf("fp8 dense, batched decode vs CPU: worst step rel L2 %.3e\n", worst);
}

// Chunkings that stay on the W8A16 path agree closely (it is batch-invariant per row).
TEST_F(CudaFp8DenseTest, ChunkingsAgree) {
  const Fp8DenseCheckpoint official(config_, true);
  auto model = MakeCuda(official, DenseFormat::kFP8);
  ASSERT_TRUE(model);
  const std::vector<float> base = Prefill(*model, 0, 64);
  for (int64_t chunk : {1, 7, 33}) {
    const std::vector<float> other = Prefill(*model, 1, chunk);
    ASSERT_EQ(other.size(), base.size());
    const double err = RelativeL2(other.data(), base.data(), static_cast<int64_t>(base.size()));
    std::printf("fp8 dense, chunk %lld vs chunk 64: rel L2 %.3e\n", static_cast<long long>(chunk), err);
    EXPECT_LE(err, kChunkingTolerance) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace peregrine::deepseek_v4::cuda
