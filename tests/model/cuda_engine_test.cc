// The engine on the CUDA model runner (runtime/cuda_model_runner.h), on every fixture:
// overlapped steps (step n+1 launched before step n's tokens reach the host, fed on the
// device) give exactly the tokens and logprobs of synchronous steps, with decode graphs and
// without, for greedy, seeded, truncated, logprob and penalised requests. The requests run
// with ignore_eos and each one's length fixed, so both modes run the same batches and no
// rounding differs between them. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "backend/cuda/device.h"
#include "engine/engine.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_model_runner.h"

namespace peregrine {
namespace {

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
};

std::vector<EngineRequest> Requests(int64_t vocab) {
  std::vector<EngineRequest> out;
  for (int i = 0; i < 7; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);
    for (int t = 0; t < 11 + 13 * i; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 31 + i * 17 + 3) % vocab));
    r.max_tokens = 12 + 3 * i;
    r.ignore_eos = true;
    r.sampling.seed = 1000 + static_cast<uint64_t>(i);
    r.sampling.logprobs = i % 2 == 0 ? 3 : -1;
    switch (i) {
      case 0: r.sampling.temperature = 0.0f; break;
      case 1: r.sampling.temperature = 0.8f; break;
      case 2: r.sampling.temperature = 1.0f; r.sampling.top_p = 0.9f; break;
      case 3: r.sampling.temperature = 1.2f; r.sampling.top_k = 5; break;
      case 4: r.sampling.temperature = 0.7f; r.sampling.min_p = 0.05f; break;
      case 5: r.sampling.temperature = 0.9f; r.sampling.presence_penalty = 0.5f; break;  // never planned ahead
      default: r.sampling.temperature = 0.0f; break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

class CudaEngineTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  std::vector<Collected> Run(bool overlap, bool graphs) {
    const auto dir = GetParam() / "model";
    auto config = LoadModelConfig(dir);
    EXPECT_TRUE(config.ok()) << config.status().ToString();
    auto checkpoint = Checkpoint::Open(dir);
    EXPECT_TRUE(checkpoint.ok()) << checkpoint.status().ToString();
    if (!config.ok() || !checkpoint.ok()) return {};
    constexpr int64_t kSeqs = 8;
    deepseek_v4::cuda::CudaModelOptions o;
    o.num_slots = kSeqs;
    o.max_tokens = 64;  // a small budget: prompts are chunked and share steps with decodes
    o.max_context = std::min<int64_t>(config->max_position_embeddings, 256);
    auto model = deepseek_v4::cuda::CudaModel::Create(*config, **checkpoint, o);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    if (!model.ok()) return {};
    if (graphs) {
      EXPECT_TRUE((*model)->EnableGraphs(kSeqs).ok());
    }
    EngineConfig ec;
    ec.scheduler.max_num_batched_tokens = o.max_tokens;
    ec.scheduler.max_num_seqs = kSeqs;
    ec.kv_cache.num_slots = static_cast<int32_t>(kSeqs);
    ec.kv_cache.page_size = 16;
    ec.kv_cache.csa_ratio = config->compress_ratio_csa;
    ec.kv_cache.hca_ratio = config->compress_ratio_hca;
    ec.kv_cache.num_csa_pages = 256;
    ec.kv_cache.num_hca_pages = 64;
    vocab_ = config->vocab_size;
    Engine engine(ec, std::make_unique<CudaModelRunner>(std::move(model).value(), /*device_sampling=*/true, overlap));
    const std::vector<EngineRequest> requests = Requests(vocab_);
    std::vector<Collected> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      Status s = engine.Submit(requests[i], [&out, i](const EngineEvent& ev) {
        Collected& c = out[i];
        c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
        for (const SampleResult& r : ev.samples) c.logprobs.push_back(r.logprob);
        if (ev.finish) {
          c.finish = ev.finish;
          c.error = ev.error;
        }
      });
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int step = 0; step < 10000 && engine.Step(); ++step) {
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(out[i].finish, FinishReason::kLength) << i << " " << out[i].error;
      EXPECT_EQ(static_cast<int64_t>(out[i].tokens.size()), requests[i].max_tokens) << i;
    }
    return out;
  }

  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  }

  int64_t vocab_ = 0;
};

TEST_P(CudaEngineTest, OverlappedStepsGiveTheSynchronousTokens) {
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "decode graphs" : "eager");
    const std::vector<Collected> sync = Run(/*overlap=*/false, graphs);
    const std::vector<Collected> overlap = Run(/*overlap=*/true, graphs);
    ASSERT_EQ(sync.size(), overlap.size());
    for (size_t i = 0; i < sync.size(); ++i) {
      EXPECT_EQ(overlap[i].tokens, sync[i].tokens) << "request " << i;
      EXPECT_EQ(overlap[i].logprobs, sync[i].logprobs) << "request " << i;
      for (int32_t t : overlap[i].tokens) EXPECT_TRUE(t >= 0 && t < vocab_) << t;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaEngineTest, ::testing::ValuesIn(testing::FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine
