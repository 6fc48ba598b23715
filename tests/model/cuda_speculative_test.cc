// Speculative decoding on the CUDA runner with the trained demo model (real text, an MTP
// layer trained with the model): the checkpoint's MTP layer drafting on the device, and the
// n-gram drafter, against the same requests without speculation. With batch-invariant
// kernels a verified chain's logits are bit for bit those of decoding its tokens one by one,
// so every request's tokens and logprobs must be the same (greedy, seeded sampling with
// top-p, repetition and frequency penalties, min_tokens, stop tokens, logprobs). The MTP drafts must be accepted at a
// rate near the CPU drafter's (a drafter that followed the wrong rows or positions would
// propose noise). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/device.h"
#include "demo_model_golden.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/model.h"
#include "runtime/cpu_model_runner.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"

namespace peregrine {
namespace {

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
  std::string error;
};

struct Outcome {
  std::vector<Collected> out;
  EngineStats stats;
};

std::vector<EngineRequest> Requests() {
  auto golden = testing::ReadDemoGolden();
  EXPECT_TRUE(golden.ok()) << golden.status().ToString();
  if (!golden.ok()) return {};
  std::vector<EngineRequest> out;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    r.id = "s";
    r.id += std::to_string(i);
    const std::vector<int32_t>& text = i % 2 == 0 ? golden->mtp_tokens : golden->prompt_ids;
    const size_t len = std::min<size_t>(text.size(), 20 + 23 * static_cast<size_t>(i));
    r.prompt_ids.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(len));
    r.max_tokens = 48 + 9 * (i % 3);
    r.ignore_eos = i != 3;
    r.sampling.logprobs = i % 4 == 0 ? 3 : -1;
    switch (i % 4) {
      case 1:
        r.sampling.temperature = 0.8f;
        r.sampling.top_p = 0.9f;
        r.sampling.seed = 1000 + static_cast<uint64_t>(i);
        break;
      case 2:
        r.sampling.temperature = 1.0f;
        r.sampling.seed = 77;
        r.sampling.frequency_penalty = 0.4f;
        r.sampling.min_tokens = 12;
        break;
      case 3:
        r.sampling.temperature = 0.0f;
        r.sampling.repetition_penalty = 1.3f;
        r.stop_token_ids = {text[len / 2]};
        break;
      default:
        r.sampling.temperature = 0.0f;
        break;
    }
    out.push_back(std::move(r));
  }
  return out;
}

Outcome Serve(std::unique_ptr<ModelRunner> runner, const std::vector<EngineRequest>& requests) {
  Outcome result;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 128;
  ec.scheduler.max_num_seqs = 8;
  Engine engine(ec, std::move(runner));
  result.out.resize(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    Status s = engine.Submit(requests[i], [&result, i](const EngineEvent& ev) {
      Collected& c = result.out[i];
      c.tokens.insert(c.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const SampleResult& x : ev.samples) c.logprobs.push_back(x.logprob);
      if (ev.finish) c.finish = ev.finish;
      c.error += ev.error;
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  for (int step = 0; step < 20000 && engine.Step(); ++step) {
  }
  result.stats = engine.Stats();
  return result;
}

Outcome RunCuda(const speculative::SpeculativeConfig& spec, bool graphs, bool prefix_caching = true) {
  const auto dir = testing::DemoModelDir();
  auto config = LoadModelConfig(dir);
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(config.ok() && checkpoint.ok());
  if (!config.ok() || !checkpoint.ok()) return {};
  DeviceModelRegistry registry;
  deepseek_v4::cuda::RegisterDeviceModel(registry);
  auto factory = registry.Find(config->model_type);
  EXPECT_TRUE(factory.ok());
  if (!factory.ok()) return {};
  ExecutorOptions o;
  o.num_slots = 8;
  o.max_tokens = 128;
  o.max_context = 512;
  o.block_tokens = 64;  // snapshot boundaries inside the generated text
  o.kv_tokens = 8 * 512;
  o.prefix_caching = prefix_caching;
  o.snapshot_fraction = 0.5;
  o.batch_invariant = true;
  o.max_verify_rows = CudaModelRunner::VerifyRows(spec, o.num_slots);
  o.max_logit_rows = std::max(o.num_slots, o.max_verify_rows);
  if (spec.algorithm == speculative::Algorithm::kMtp) o.max_draft_steps = spec.num_steps;
  auto executor = DeviceExecutor::Create(*config, **checkpoint, *factory, o);
  EXPECT_TRUE(executor.ok()) << executor.status().ToString();
  if (!executor.ok()) return {};
  if (graphs) {
    EXPECT_TRUE((*executor)->EnableGraphs(8).ok());
  }
  if (spec.algorithm == speculative::Algorithm::kMtp) {
    EXPECT_TRUE((*executor)->has_drafter());
  }
  return Serve(std::make_unique<CudaModelRunner>(std::move(executor).value(), true, true, spec), Requests());
}

speculative::SpeculativeConfig Spec(speculative::Algorithm algorithm, int32_t steps) {
  speculative::SpeculativeConfig c;
  c.algorithm = algorithm;
  c.num_steps = steps;
  return c;
}

double MeanAccepted(const EngineStats& s) {
  return s.spec_num_drafts > 0 ? static_cast<double>(s.spec_num_accepted_tokens) / static_cast<double>(s.spec_num_drafts)
                               : 0.0;
}

void ExpectIdentical(const Outcome& got, const Outcome& want, const std::string& what) {
  ASSERT_EQ(got.out.size(), want.out.size());
  for (size_t i = 0; i < want.out.size(); ++i) {
    const auto& a = got.out[i].tokens;
    const auto& b = want.out[i].tokens;
    size_t first = 0;
    while (first < a.size() && first < b.size() && a[first] == b[first]) ++first;
    if (a != b)
      std::printf("%s: request %zu differs from token %zu (%zu vs %zu tokens)\n", what.c_str(), i, first, a.size(),
                  b.size());
    ASSERT_TRUE(want.out[i].finish.has_value()) << i << " " << want.out[i].error;
    EXPECT_EQ(got.out[i].finish, want.out[i].finish) << what << ", request " << i << ": " << got.out[i].error;
    EXPECT_EQ(got.out[i].tokens, want.out[i].tokens) << what << ", request " << i;
    EXPECT_EQ(got.out[i].logprobs, want.out[i].logprobs) << what << ", request " << i;
  }
}

class CudaSpeculativeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(CudaSpeculativeTest, MtpAndNgramChainsGiveTheNonSpeculativeTokens) {
  const Outcome plain = RunCuda({}, /*graphs=*/true);
  // The CPU drafter's acceptance on the same requests, for comparison.
  auto model = deepseek_v4::Model::Load(testing::DemoModelDir(), 2);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  CpuRunnerOptions co;
  co.num_slots = 8;
  co.kv_tokens = 8 * 512;
  co.block_tokens = 64;
  co.speculative = Spec(speculative::Algorithm::kMtp, 3);
  auto cpu_runner = CpuModelRunner::Create(std::move(model).value(), co);
  ASSERT_TRUE(cpu_runner.ok()) << cpu_runner.status().ToString();
  const Outcome cpu = Serve(std::move(cpu_runner).value(), Requests());
  std::printf("CPU mtp 3 steps: %lld verify steps, mean accepted %.3f\n", static_cast<long long>(cpu.stats.spec_num_drafts),
              MeanAccepted(cpu.stats));
  for (const auto& [algorithm, steps, graphs] :
       {std::tuple{speculative::Algorithm::kMtp, 3, true}, std::tuple{speculative::Algorithm::kMtp, 5, false},
        std::tuple{speculative::Algorithm::kNgram, 4, true}}) {
    const std::string what = std::string(speculative::AlgorithmName(algorithm)) + " " + std::to_string(steps) +
                             " steps" + (graphs ? ", graphs" : ", eager");
    const Outcome got = RunCuda(Spec(algorithm, steps), graphs);
    ExpectIdentical(got, plain, what);
    EXPECT_GT(got.stats.spec_num_drafts, 0) << what;
    std::printf("CUDA %s: %lld verify steps, %lld draft tokens, mean accepted %.3f\n", what.c_str(),
                static_cast<long long>(got.stats.spec_num_drafts),
                static_cast<long long>(got.stats.spec_num_draft_tokens), MeanAccepted(got.stats));
    if (algorithm == speculative::Algorithm::kMtp && steps == 3) {
      // The same layer drafts on both backends; bf16 rounding may move a near-tie.
      EXPECT_GT(MeanAccepted(got.stats), 0.75 * MeanAccepted(cpu.stats)) << what;
    }
  }
}

}  // namespace
}  // namespace peregrine
