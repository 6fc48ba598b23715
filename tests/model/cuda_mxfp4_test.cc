// DeepSeek-V4 on the CUDA backend with MXFP4 routed experts read from a checkpoint
// (WeightLoadOptions::expert_format = kMXFP4 without synthetic weights) against the CPU
// backend on the same weights. Skipped without a GPU.
//
// The weights: the demo model's shapes with deterministic synthetic values, the routed
// experts rounded to the release's MXFP4 grid (QuantizeMxfp4: e2m1 codes, one UE8M0 scale per
// 32 inputs). A checkpoint wrapper gives the CPU backend those values dequantised (exact in
// f32) and the CUDA loader either the codes and scales themselves (as the release stores them)
// or the same values as floats (it then quantises them at load, to the same values). Both
// backends therefore multiply by identical expert weights. Learned routing picks every expert
// and the indexer keeps every entry, so no discrete choice can flip between the f32 CPU
// forward and the bf16 device forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <regex>
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
#include "model/dequant.h"
#include "model/synthetic_checkpoint.h"

namespace peregrine::deepseek_v4::cuda {
namespace {

using testing::StepChunk;
using testing::RelativeL2;

constexpr uint64_t kSeed = 91;
// bf16 activations, KV and dense weights against the CPU's f32 (the expert weights are
// exact on both sides): the bf16 model's bound (cuda_parity_test measures 1.3e-2 to 3.5e-2).
constexpr double kBf16Tolerance = 5e-2;

bool IsRoutedExpert(std::string_view name) {
  static const std::regex kExpert(R"(^layers\.\d+\.ffn\.experts\.\d+\.w[123]\.weight$)");
  return std::regex_match(name.begin(), name.end(), kExpert);
}

// Synthetic weights with the routed experts stored as MXFP4: ReadF32 dequantises them (what
// the CPU backend sees), ReadMxfp4 returns the codes when `expose_mxfp4`.
class Mxfp4ExpertCheckpoint final : public Checkpoint {
 public:
  Mxfp4ExpertCheckpoint(const ModelConfig& config, bool expose_mxfp4)
      : base_(MakeSyntheticCheckpoint(config, kSeed)), expose_(expose_mxfp4) {}

  bool Has(std::string_view name) const override { return base_->Has(name); }
  Result<HostTensor> ReadF32(std::string_view name, const Shape& expected) const override {
    PG_ASSIGN_OR_RETURN(HostTensor t, base_->ReadF32(name, expected));
    if (!IsRoutedExpert(name)) return t;
    PG_ASSIGN_OR_RETURN(Mxfp4Tensor q, Quantized(name, expected));
    std::shared_ptr<float[]> out(new float[static_cast<size_t>(expected.numel())]);
    DequantMxfp4(q.codes.view.as<const uint8_t>(), expected[0], expected[1], q.scales.view.as<const uint8_t>(),
                 out.get());
    return HostTensor{Tensor::Contiguous(out.get(), DType::kF32, expected), out};
  }
  Result<std::optional<Mxfp4Tensor>> ReadMxfp4(std::string_view name, const Shape& expected) const override {
    if (!expose_ || !IsRoutedExpert(name)) return std::optional<Mxfp4Tensor>();
    PG_ASSIGN_OR_RETURN(Mxfp4Tensor q, Quantized(name, expected));
    return std::optional<Mxfp4Tensor>(std::move(q));
  }
  Result<HostTensor> ReadI64(std::string_view name, const Shape& expected) const override {
    return base_->ReadI64(name, expected);
  }
  Result<Shape> LogicalShape(std::string_view name) const override { return base_->LogicalShape(name); }
  std::vector<std::string> CanonicalNames() const override { return base_->CanonicalNames(); }
  uint64_t TotalBytes() const override { return base_->TotalBytes(); }

 private:
  Result<Mxfp4Tensor> Quantized(std::string_view name, const Shape& shape) const {
    PG_ASSIGN_OR_RETURN(HostTensor t, base_->ReadF32(name, shape));
    const int64_t rows = shape[0], cols = shape[1];
    std::shared_ptr<uint8_t[]> codes(new uint8_t[static_cast<size_t>(rows * cols / 2)]);
    std::shared_ptr<uint8_t[]> scales(new uint8_t[static_cast<size_t>(rows * cols / 32)]);
    QuantizeMxfp4(t.f32(), rows, cols, codes.get(), scales.get());
    Mxfp4Tensor q;
    q.codes = HostTensor{Tensor::Contiguous(codes.get(), DType::kU8, {rows, cols / 2}), codes};
    q.scales = HostTensor{Tensor::Contiguous(scales.get(), DType::kU8, {rows, cols / 32}), scales};
    return q;
  }

  std::unique_ptr<Checkpoint> base_;
  bool expose_;
};

ModelConfig TestConfig() {
  ModelConfig c = DemoModelConfig();
  c.vocab_size = 512;
  c.num_experts = 4;
  c.num_experts_per_tok = 4;  // learned routing takes every expert: nothing to flip
  c.index_topk = 2048;        // above every entry count here: the indexer keeps them all
  return c;
}

class CudaMxfp4ExpertsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    config_ = TestConfig();
    for (int64_t i = 0; i < 160; ++i) prompt_.push_back(static_cast<int32_t>((i * 37 + 11) % config_.vocab_size));
  }

  std::unique_ptr<testing::SlotModel> MakeCuda(const Checkpoint& checkpoint, ExpertFormat format) {
    testing::SlotModelOptions o;
    o.num_slots = 4;
    o.max_tokens = 256;
    o.max_context = 1024;
    o.max_logit_rows = 256;
    o.weights.expert_format = format;
    auto model = testing::SlotModel::Create(config_, checkpoint, o);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  // Prefills the prompt into `slot` in chunks of `chunk`; logits of every token [T, V].
  std::vector<float> Prefill(testing::SlotModel& model, int32_t slot, int64_t chunk) {
    return testing::PrefillLogits(model, slot, prompt_, chunk);
  }

  ModelConfig config_;
  std::vector<int32_t> prompt_;
};

// The checkpoint's MXFP4 bytes and the same values quantised at load are the same expert
// weights to the kernel: identical logits. The model with MXFP4 experts holds fewer bytes.
TEST_F(CudaMxfp4ExpertsTest, CheckpointMxfp4EqualsQuantisedAtLoad) {
  const Mxfp4ExpertCheckpoint official(config_, true), plain(config_, false);
  auto from_mxfp4 = MakeCuda(official, ExpertFormat::kMXFP4);
  auto at_load = MakeCuda(plain, ExpertFormat::kMXFP4);
  auto bf16 = MakeCuda(plain, ExpertFormat::kBF16);
  ASSERT_TRUE(from_mxfp4 && at_load && bf16);
  EXPECT_LT(from_mxfp4->weight_bytes(), bf16->weight_bytes());
  std::printf("weights: %.2f MB with MXFP4 experts, %.2f MB with bf16 experts\n", from_mxfp4->weight_bytes() / 1e6,
              bf16->weight_bytes() / 1e6);
  const std::vector<float> a = Prefill(*from_mxfp4, 0, 64), b = Prefill(*at_load, 0, 64);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_TRUE(a == b) << "rel L2 " << RelativeL2(a.data(), b.data(), static_cast<int64_t>(a.size()));
  // The bf16-expert model on the same (grid) values differs only by the kernels' rounding.
  const std::vector<float> c = Prefill(*bf16, 0, 64);
  const double err = RelativeL2(a.data(), c.data(), static_cast<int64_t>(a.size()));
  std::printf("MXFP4 experts vs bf16 experts holding the same values: rel L2 %.3e\n", err);
  EXPECT_LE(err, 1e-2);
}

// Against the CPU backend on identical weights: prefill in chunks, then batched decode
// steps through graph buckets.
TEST_F(CudaMxfp4ExpertsTest, MatchesCpuBackend) {
  const Mxfp4ExpertCheckpoint official(config_, true);
  auto model = MakeCuda(official, ExpertFormat::kMXFP4);
  ASSERT_TRUE(model);
  auto cpu = Model::Create(config_, std::make_unique<Mxfp4ExpertCheckpoint>(config_, false), 2);
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  SequenceState whole = (*cpu)->NewSequence();
  std::vector<float> want;
  ASSERT_TRUE((*cpu)->Forward(whole, prompt_, /*all_logits=*/true, &want).ok());
  const std::vector<float> got = Prefill(*model, 0, 64);
  ASSERT_EQ(got.size(), want.size());
  const double err = RelativeL2(got.data(), want.data(), static_cast<int64_t>(want.size()));
  std::printf("MXFP4 experts from the checkpoint, prefill vs CPU: rel L2 %.3e\n", err);
  EXPECT_LE(err, kBf16Tolerance);

  ASSERT_TRUE(model->EnableGraphs(4).ok());
  const int64_t lengths[] = {5, 70, 131};
  const std::vector<double> errors =
      testing::BatchedDecodeErrors(*model, **cpu, prompt_, lengths, /*first_slot=*/1, /*chunk=*/1 << 20);
  ASSERT_FALSE(errors.empty());
  const double worst = *std::max_element(errors.begin(), errors.end());
  EXPECT_LE(worst, kBf16Tolerance);
  std::printf("MXFP4 experts, batched decode vs CPU: worst step rel L2 %.3e\n", worst);
}

}  // namespace
}  // namespace peregrine::deepseek_v4::cuda
