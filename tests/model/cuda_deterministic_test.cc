// Batch-invariant kernels on the CUDA backend (--enable-deterministic-inference,
// DeviceModelLimits::batch_invariant): a sequence's logits are bit for bit the same however
// its prompt is chunked, whatever shares its steps, and whichever decode graph bucket (with
// padding rows) its token lands in, with graphs and without. Over every fixture (the fast
// kernels' shapes and the generic ones), the demo model's shapes with learned routing over 8
// experts (so the experts a batch touches vary), MXFP4 experts and FP8 dense projections
// quantised at load, and two V4-Flash layers (CSA and HCA at the real widths, 256 experts,
// weights generated on the device), where cuBLAS's algorithm choice by row count is real. The same runs with the default kernels are printed beside
// them (their logits differ by rounding: cuBLAS picks its algorithm by row count, attention
// splits by the batch's load, the MoE and mHC kernels split by the batch's size).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/device.h"
#include "cuda_model_util.h"
#include "cuda_thread_group.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/demo_model.h"
#include "model/synthetic_checkpoint.h"

namespace peregrine::deepseek_v4::cuda {
namespace {

using testing::StepChunk;

enum class Source { kFixture, kDemoShapes, kFlashLayers };
struct Case {
  std::string name;
  std::filesystem::path dir;  // the fixture
  Source source = Source::kFixture;
};

// gtest prints a parameter through this (the test names already carry it).
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  std::vector<Case> out;
  for (const auto& dir : testing::FixtureDirs()) out.push_back({dir.filename().string(), dir});
  out.push_back({"demo_mxfp4_fp8", {}, Source::kDemoShapes});
  out.push_back({"flash_2layers_mxfp4", {}, Source::kFlashLayers});
  return out;
}

// Two V4-Flash layers: a CSA and an HCA layer, both with learned routing (V4-Flash's layers 4
// and 3), at the real widths; a smaller vocabulary (the head's width is not what is checked).
Result<ModelConfig> FlashLayers() {
  PG_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(testing::SourceRoot() / "bench" / "configs" / "deepseek-v4-flash"));
  c.num_layers = 2;
  c.layer_types = {AttentionType::kCompressedSparse, AttentionType::kHeavilyCompressed};
  c.mlp_layer_types = {MoeType::kLearned, MoeType::kLearned};
  c.vocab_size = 16384;
  return c;
}

// Index of the first element whose bits differ, or -1.
int64_t FirstDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i])) return static_cast<int64_t>(i);
  return -1;
}

class CudaDeterministicTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
    const Case& c = GetParam();
    if (c.source == Source::kDemoShapes) {
      config_ = DemoModelConfig();
      config_.vocab_size = 4096;  // logits rows stay small; the layers are the demo model's
      checkpoint_ = MakeSyntheticCheckpoint(config_, 20261204);
    } else if (c.source == Source::kFlashLayers) {
      auto config = FlashLayers();
      ASSERT_TRUE(config.ok()) << config.status().ToString();
      config_ = *config;
      checkpoint_ = MakeSyntheticCheckpoint(config_, 20261204);
    } else {
      auto config = LoadModelConfig(c.dir / "model");
      ASSERT_TRUE(config.ok()) << config.status().ToString();
      config_ = *config;
      auto checkpoint = Checkpoint::Open(c.dir / "model");
      ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
      checkpoint_ = std::move(checkpoint).value();
    }
    const int64_t max_context = std::min<int64_t>(config_.max_position_embeddings, 512);
    const int64_t length = std::min<int64_t>(200, max_context - 16);
    for (int64_t i = 0; i < length; ++i) prompt_.push_back(static_cast<int32_t>((i * 37 + 11) % config_.vocab_size));
  }

  std::unique_ptr<testing::SlotModel> Make(bool batch_invariant) {
    testing::SlotModelOptions o;
    o.num_slots = 4;
    o.max_tokens = 512;
    o.max_context = std::min<int64_t>(config_.max_position_embeddings, 512);
    o.max_logit_rows = 512;
    o.batch_invariant = batch_invariant;
    if (GetParam().source == Source::kDemoShapes) {
      o.weights.expert_format = ExpertFormat::kMXFP4;
      o.weights.dense_format = DenseFormat::kFP8;
    } else if (GetParam().source == Source::kFlashLayers) {
      o.weights.synthetic_matrices = true;  // generated on the device
      o.weights.seed = 20261204;
      o.weights.expert_format = ExpertFormat::kMXFP4;
    }
    auto model = testing::SlotModel::Create(config_, *checkpoint_, o);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    return model.ok() ? std::move(model).value() : nullptr;
  }

  // Differences (count of comparisons whose bits differ) between the whole prefill and: chunks
  // of 1, 7 and 64; two sequences side by side split at other points, in swapped order.
  int PrefillDifferences(testing::SlotModel& model) {
    const std::vector<float> full = testing::PrefillLogits(model, 0, prompt_, static_cast<int64_t>(prompt_.size()));
    int differ = 0;
    for (int64_t chunk : {1, 7, 64}) {
      const int64_t at = FirstDifference(testing::PrefillLogits(model, 1, prompt_, chunk), full);
      if (at >= 0) {
        ++differ;
        std::printf("  chunk %lld: first difference at logit %lld\n", static_cast<long long>(chunk),
                    static_cast<long long>(at));
      }
    }
    const std::span<const int32_t> p(prompt_);
    const size_t split_a = p.size() * 3 / 4, split_b = p.size() / 5;
    std::vector<float> first, second;
    const StepChunk step1[] = {{2, 0, p.first(split_a), true, true}, {3, 0, p.first(split_b), true, true}};
    EXPECT_TRUE(model.Forward(step1, &first).ok());
    const StepChunk step2[] = {{3, static_cast<int64_t>(split_b), p.subspan(split_b), true, true},
                               {2, static_cast<int64_t>(split_a), p.subspan(split_a), true, true}};
    EXPECT_TRUE(model.Forward(step2, &second).ok());
    const int64_t v = config_.vocab_size;
    std::vector<float> a(first.begin(), first.begin() + static_cast<int64_t>(split_a) * v);
    a.insert(a.end(), second.begin() + static_cast<int64_t>(p.size() - split_b) * v, second.end());
    std::vector<float> b(first.begin() + static_cast<int64_t>(split_a) * v, first.end());
    b.insert(b.end(), second.begin(), second.begin() + static_cast<int64_t>(p.size() - split_b) * v);
    differ += FirstDifference(a, full) >= 0;
    differ += FirstDifference(b, full) >= 0;
    return differ;
  }

  // Slot 0 decodes 8 tokens alone; slot 1, prefilled identically, decodes the same tokens
  // beside slot 2, slot 3 or both (other lengths), with slot 1 at changing rows: decode
  // batches of 2 and 3 (graph buckets 2 and 4, one padding row) and, every other step, slot
  // 3 prefilling a 40-token chunk beside them (a 41- or 42-row step: other GEMM shapes, other
  // attention splits). Returns how many of slot 1's steps differ in any bit from slot 0's.
  int DecodeDifferences(testing::SlotModel& model, bool graphs) {
    EXPECT_TRUE(model.EnableGraphs(graphs ? 4 : 0).ok());
    std::vector<float> ignored;
    const std::span<const int32_t> p(prompt_);
    int64_t next[] = {static_cast<int64_t>(p.size()), static_cast<int64_t>(p.size()),
                      static_cast<int64_t>(p.size() / 3), static_cast<int64_t>(p.size() / 2 + 1)};
    for (int32_t s = 0; s < 4; ++s) {
      const StepChunk c{s, 0, p.first(static_cast<size_t>(next[s])), true, false};
      EXPECT_TRUE(model.Forward({&c, 1}, &ignored).ok());
    }
    const std::vector<std::vector<int32_t>> orders = {{1, 2}, {3, 1}, {2, 1, 3}, {3, 2, 1}, {1, 3, 2}};
    int differ = 0;
    for (int step = 0; step < 8; ++step) {
      const int32_t token[] = {static_cast<int32_t>((step * 13 + 5) % config_.vocab_size)};
      const int32_t other[] = {static_cast<int32_t>((step * 7 + 3) % config_.vocab_size)};
      std::vector<float> alone, batched;
      const StepChunk one{0, next[0]++, token, true, false};
      EXPECT_TRUE(model.Forward({&one, 1}, &alone).ok());
      const std::vector<int32_t>& order = orders[static_cast<size_t>(step) % orders.size()];
      std::vector<StepChunk> chunks;
      for (int32_t s : order) {
        std::span<const int32_t> tokens = s == 1 ? std::span<const int32_t>(token) : std::span<const int32_t>(other);
        if (s == 3 && step % 2 == 1) tokens = p.subspan(static_cast<size_t>(step), 40);
        chunks.push_back({s, next[s], tokens, true, false});
        next[s] += static_cast<int64_t>(tokens.size());
      }
      EXPECT_TRUE(model.Forward(chunks, &batched).ok());
      const int64_t v = config_.vocab_size;
      const int64_t row = std::find(order.begin(), order.end(), 1) - order.begin();
      if (static_cast<int64_t>(batched.size()) < (row + 1) * v) return differ + 1;
      const std::vector<float> mine(batched.begin() + row * v, batched.begin() + (row + 1) * v);
      differ += FirstDifference(mine, alone) >= 0;
    }
    return differ;
  }

  ModelConfig config_;
  std::unique_ptr<Checkpoint> checkpoint_;
  std::vector<int32_t> prompt_;
};

TEST_P(CudaDeterministicTest, PrefillLogitsDoNotDependOnChunkingOrBatch) {
  auto invariant = Make(true);
  ASSERT_NE(invariant, nullptr);
  EXPECT_EQ(PrefillDifferences(*invariant), 0);
  auto plain = Make(false);
  ASSERT_NE(plain, nullptr);
  std::printf("%s prefill: default kernels differ in %d of 5 comparisons, batch-invariant in 0\n",
              GetParam().name.c_str(), PrefillDifferences(*plain));
}

TEST_P(CudaDeterministicTest, DecodeLogitsDoNotDependOnTheBatch) {
  for (const bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "decode graphs" : "eager");
    auto invariant = Make(true);
    ASSERT_NE(invariant, nullptr);
    EXPECT_EQ(DecodeDifferences(*invariant, graphs), 0);
    auto plain = Make(false);
    ASSERT_NE(plain, nullptr);
    std::printf("%s decode%s: default kernels differ in %d of 8 steps, batch-invariant in 0\n",
                GetParam().name.c_str(), graphs ? " (graphs)" : "", DecodeDifferences(*plain, graphs));
  }
}

// The logits of one sequence (the prompt's last row, then 4 decode steps) run alone in slot 0,
// then again in slot 1 beside slot 2: prompts in 48-token chunks sharing each step with slot
// 2's, decodes beside slot 2's. Returns [alone..., batched...].
std::vector<std::vector<float>> AloneThenBatched(testing::SlotModel& model, std::span<const int32_t> p, int64_t vocab) {
  std::vector<std::vector<float>> out;
  std::vector<float> logits;
  const std::vector<int32_t> other(p.rbegin(), p.rend());
  const int64_t n = static_cast<int64_t>(p.size());
  const int32_t tokens[4] = {5, 18, 31, 44};
  const StepChunk whole{0, 0, p, true, false};
  EXPECT_TRUE(model.Forward({&whole, 1}, &logits).ok());
  out.push_back(logits);
  for (int i = 0; i < 4; ++i) {
    const StepChunk c{0, n + i, {&tokens[i], 1}, true, false};
    EXPECT_TRUE(model.Forward({&c, 1}, &logits).ok());
    out.push_back(logits);
  }
  for (int64_t begin = 0; begin < n; begin += 48) {
    const size_t len = static_cast<size_t>(std::min<int64_t>(48, n - begin));
    const bool last = begin + 48 >= n;
    const StepChunk chunks[2] = {{2, begin, std::span<const int32_t>(other).subspan(static_cast<size_t>(begin), len), false, false},
                                 {1, begin, p.subspan(static_cast<size_t>(begin), len), last, false}};
    EXPECT_TRUE(model.Forward(chunks, &logits).ok());
    if (last) out.push_back(logits);
  }
  for (int i = 0; i < 4; ++i) {
    const int32_t mate = static_cast<int32_t>((i * 7 + 3) % vocab);
    const StepChunk chunks[2] = {{2, n + i, {&mate, 1}, true, false}, {1, n + i, {&tokens[i], 1}, true, false}};
    EXPECT_TRUE(model.Forward(chunks, &logits).ok());
    out.emplace_back(logits.begin() + vocab, logits.end());  // slot 1's row
  }
  return out;
}

// Tensor and expert parallel (2 ranks as threads on the GPU, summing over cuda_thread_group.h
// in rank order, as the custom all-reduce does; NCCL with 2 ranks adds two values per element,
// the same either way): rank 0's logits of a sequence alone and batched are bit for bit the
// same with batch-invariant kernels, on two V4-Flash layers. Printed beside: the default kernels.
TEST(CudaDeterministicShardedTest, TensorAndExpertParallelRanksAreBatchInvariant) {
  if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  auto config = FlashLayers();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  const std::unique_ptr<Checkpoint> checkpoint = MakeSyntheticCheckpoint(*config, 20261204);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 150; ++i) prompt.push_back(static_cast<int32_t>((i * 37 + 11) % config->vocab_size));
  for (const bool expert_parallel : {false, true}) {
    for (const bool invariant : {true, false}) {
      testing::ThreadGroup group(2);
      std::vector<std::vector<std::vector<float>>> ranks(2);
      std::vector<std::string> failures(2);
      std::vector<std::thread> threads;
      for (int r = 0; r < 2; ++r) {
        threads.emplace_back([&, r] {
          std::unique_ptr<distributed::Communicator> comm = group.Member(r);
          testing::SlotModelOptions o;
          o.num_slots = 3;
          o.max_tokens = 256;
          o.max_context = 256;
          o.max_logit_rows = 256;
          o.batch_invariant = invariant;
          o.weights.synthetic_matrices = true;
          o.weights.seed = 20261204;
          o.weights.expert_format = ExpertFormat::kMXFP4;
          o.parallel = DeviceParallel{r, 2, expert_parallel, comm.get()};
          auto model = testing::SlotModel::Create(*config, *checkpoint, o);
          if (!model.ok()) {
            failures[static_cast<size_t>(r)] = model.status().ToString();
            return;
          }
          ranks[static_cast<size_t>(r)] = AloneThenBatched(**model, prompt, config->vocab_size);
        });
      }
      for (std::thread& t : threads) t.join();
      for (const std::string& f : failures) ASSERT_TRUE(f.empty()) << f;
      ASSERT_EQ(ranks[0].size(), 10u);
      EXPECT_TRUE(ranks[1] == ranks[0]) << "the ranks' logits differ";
      int differ = 0;
      for (size_t i = 0; i < 5; ++i) differ += FirstDifference(ranks[0][i + 5], ranks[0][i]) >= 0;
      const char* what = expert_parallel ? "EP 2" : "TP 2";
      if (invariant) {
        EXPECT_EQ(differ, 0) << what;
      }
      std::printf("flash_2layers %s, %s: %d of 5 steps differ alone vs batched\n", what,
                  invariant ? "batch-invariant" : "default kernels", differ);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaDeterministicTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace peregrine::deepseek_v4::cuda
