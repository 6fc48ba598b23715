// Prefill/decode disaggregation on the CUDA runner: pages exported from the device pools
// and imported into another runner's come back byte for byte, and a request run alone on a
// prefill engine and then a decode engine (its KV carried as pages) gives exactly the tokens
// and logprobs of the same request run alone on one engine, with decode graphs and
// overlapped steps. Skipped without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "backend/cuda/device.h"
#include "engine/engine.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"

namespace peregrine {
namespace {

constexpr int64_t kSeqs = 4;

std::unique_ptr<CudaModelRunner> MakeRunner(const std::filesystem::path& fixture) {
  const auto dir = fixture / "model";
  auto config = LoadModelConfig(dir);
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(config.ok() && checkpoint.ok());
  if (!config.ok() || !checkpoint.ok()) return nullptr;
  DeviceModelRegistry registry;
  deepseek_v4::cuda::RegisterDeviceModel(registry);
  auto factory = registry.Find(config->model_type);
  if (!factory.ok()) return nullptr;
  ExecutorOptions o;
  o.num_slots = kSeqs;
  o.max_tokens = 64;
  o.max_context = std::min<int64_t>(config->max_position_embeddings, 256);
  o.block_tokens = 64;
  o.kv_tokens = 8 * 256;
  o.prefix_caching = false;
  o.max_logit_rows = kSeqs;
  auto executor = DeviceExecutor::Create(*config, **checkpoint, *factory, o);
  EXPECT_TRUE(executor.ok()) << executor.status().ToString();
  if (!executor.ok()) return nullptr;
  EXPECT_TRUE((*executor)->EnableGraphs(kSeqs).ok());
  return std::make_unique<CudaModelRunner>(std::move(executor).value(), true, true);
}

std::unique_ptr<Engine> MakeEngine(const std::filesystem::path& fixture) {
  auto runner = MakeRunner(fixture);
  if (runner == nullptr) return nullptr;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 64;
  ec.scheduler.max_num_seqs = kSeqs;
  return std::make_unique<Engine>(ec, std::move(runner));
}

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
};

EventSink Into(Collected* c) {
  return [c](const EngineEvent& ev) {
    c->tokens.insert(c->tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const SampleResult& s : ev.samples) c->logprobs.push_back(s.logprob);
    if (ev.finish) c->finish = ev.finish;
  };
}

void Drain(Engine& e) {
  for (int i = 0; i < 100000 && e.Step(); ++i) {
  }
}

class CudaDisaggregationTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaDisaggregationTest, RequestsDecodedFromTransferredPagesMatchOneEngine) {
  auto colocated = MakeEngine(GetParam());
  auto prefill = MakeEngine(GetParam());
  auto decode = MakeEngine(GetParam());
  ASSERT_TRUE(colocated && prefill && decode);
  ASSERT_FALSE(decode->kv_fingerprint().empty());
  ASSERT_EQ(prefill->kv_fingerprint(), decode->kv_fingerprint());
  const int64_t vocab = colocated->vocab_size();
  for (int i = 0; i < 4; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);  // (not "r" + ...: GCC 12 -Wrestrict false positive at -O3)
    // Prompts across the 64-token blocks, greedy and seeded.
    for (int t = 0; t < 9 + 41 * i; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 37 + i * 11 + 5) % vocab));
    r.max_tokens = 14;
    r.ignore_eos = true;
    r.sampling.logprobs = 2;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    r.sampling.seed = 40 + static_cast<uint64_t>(i);
    Collected want, first, got;
    ASSERT_TRUE(colocated->Submit(r, Into(&want)).ok());
    Drain(*colocated);
    EngineRequest p = r;
    p.max_tokens = 1;
    std::shared_ptr<const TransferredKv> kv;
    p.export_kv = [&kv](Result<TransferredKv> k) {
      ASSERT_TRUE(k.ok()) << k.status().ToString();
      kv = std::make_shared<const TransferredKv>(std::move(k).value());
    };
    ASSERT_TRUE(prefill->Submit(p, Into(&first)).ok());
    Drain(*prefill);
    ASSERT_NE(kv, nullptr);
    EngineRequest d = r;
    d.import_kv = kv;
    const Status s = decode->Submit(d, Into(&got));
    ASSERT_TRUE(s.ok()) << s.ToString();
    Drain(*decode);
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got.logprobs, want.logprobs) << "request " << i;
  }
}

TEST_P(CudaDisaggregationTest, PagesRoundTripThroughTheDevicePools) {
  auto runner = MakeRunner(GetParam());
  ASSERT_NE(runner, nullptr);
  const KvLayout layout = runner->kv_capacity().layout;
  const int64_t n = 2 * layout.block_tokens + 5;
  const std::vector<int32_t> blocks = {3, 0, 5};
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), layout.BlocksFor(n));
  std::vector<std::vector<uint8_t>> none;
  EXPECT_FALSE(runner->ImportKv(1, blocks, n, none).ok());  // the wrong page count
  EXPECT_FALSE(runner->ExportKv(2, blocks, n, &none).ok());  // the slot holds nothing yet
  // Pages of the layout's sizes, filled with a pattern, go in and come out unchanged.
  std::vector<std::vector<uint8_t>> pages(blocks.size() + 1);
  int64_t slot_bytes = 0, block_bytes = 0;
  for (const KvKind& k : layout.per_request) slot_bytes += k.bytes;
  for (const KvKind& k : layout.paged) block_bytes += k.bytes;
  pages[0].resize(static_cast<size_t>(slot_bytes));
  for (size_t i = 1; i < pages.size(); ++i) pages[i].resize(static_cast<size_t>(block_bytes));
  uint32_t x = 12345;
  for (auto& p : pages)
    for (uint8_t& b : p) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
  const Status in = runner->ImportKv(2, blocks, n, pages);
  ASSERT_TRUE(in.ok()) << in.ToString();
  std::vector<std::vector<uint8_t>> out;
  const Status ex = runner->ExportKv(2, blocks, n, &out);
  ASSERT_TRUE(ex.ok()) << ex.ToString();
  ASSERT_EQ(out.size(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_TRUE(out[i] == pages[i]) << "page " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaDisaggregationTest, ::testing::ValuesIn(testing::Bf16FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine
