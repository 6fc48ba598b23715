// Speculative decoding on the CUDA runner with the trained demo model (real text, an MTP
// layer trained with the model): the checkpoint's MTP layer drafting on the device, and the
// n-gram drafter, against the same requests without speculation. With batch-invariant
// kernels a verified chain's logits are bit for bit those of decoding its tokens one by one,
// so every request's tokens and logprobs must be the same (speculative_requests.h: greedy,
// seeded sampling with top-p, repetition and frequency penalties, min_tokens, stop tokens,
// logprobs). The MTP drafts must be accepted at a rate near the CPU drafter's (a drafter that
// followed the wrong rows or positions would propose noise). Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/device.h"
#include "demo_model_golden.h"
#include "speculative_requests.h"
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/model.h"
#include "runtime/cpu_model_runner.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"

namespace peregrine {
namespace {

using Outcome = testing::EngineOutcome;
using testing::ExpectIdenticalOutcomes;
using testing::MeanAccepted;

Outcome Serve(std::unique_ptr<ModelRunner> runner) {
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 128;
  ec.scheduler.max_num_seqs = 8;
  Engine engine(ec, std::move(runner));
  return testing::ServeToEnd(engine, testing::SpeculativeRequests());
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
  return Serve(std::make_unique<CudaModelRunner>(std::move(executor).value(), true, true, spec));
}

speculative::SpeculativeConfig Spec(speculative::Algorithm algorithm, int32_t steps) {
  speculative::SpeculativeConfig c;
  c.algorithm = algorithm;
  c.num_steps = steps;
  return c;
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
  const Outcome cpu = Serve(std::move(cpu_runner).value());
  std::printf("CPU mtp 3 steps: %lld verify steps, mean accepted %.3f\n", static_cast<long long>(cpu.stats.spec_num_drafts),
              MeanAccepted(cpu.stats));
  for (const auto& [algorithm, steps, graphs] :
       {std::tuple{speculative::Algorithm::kMtp, 3, true}, std::tuple{speculative::Algorithm::kMtp, 5, false},
        std::tuple{speculative::Algorithm::kNgram, 4, true}}) {
    const std::string what = std::string(speculative::AlgorithmName(algorithm)) + " " + std::to_string(steps) +
                             " steps" + (graphs ? ", graphs" : ", eager");
    const Outcome got = RunCuda(Spec(algorithm, steps), graphs);
    ExpectIdenticalOutcomes(got, plain, what);
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
