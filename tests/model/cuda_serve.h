// The CUDA runner behind an engine for the speculative tests (cuda_speculative_test,
// cuda_block_drafter_test): the checkpoint in a directory on a DeviceExecutor with
// batch-invariant kernels, 8 slots and 128 tokens a step, serving requests to the end.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"
#include "speculative_requests.h"

namespace peregrine::testing {

struct CudaServeOptions {
  int64_t max_context = 512;
  int64_t block_tokens = 64;  // snapshot boundaries inside the generated text
  bool prefix_caching = true;
  bool graphs = true;
};

// Empty, with the failure recorded, when the model cannot be set up.
inline EngineOutcome ServeOnCuda(const std::filesystem::path& dir, const speculative::SpeculativeConfig& spec,
                                 const CudaServeOptions& options, const std::vector<EngineRequest>& requests) {
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
  o.max_context = options.max_context;
  o.block_tokens = options.block_tokens;
  o.kv_tokens = 8 * options.max_context;
  o.prefix_caching = options.prefix_caching;
  o.snapshot_fraction = 0.5;
  o.batch_invariant = true;
  o.max_verify_rows = CudaModelRunner::VerifyRows(spec, o.num_slots);
  o.max_logit_rows = std::max(o.num_slots, o.max_verify_rows);
  if (spec.needs_model_drafter()) {
    o.max_draft_steps = spec.num_steps;
    o.draft_candidates = spec.candidates();
  }
  auto executor = DeviceExecutor::Create(*config, **checkpoint, *factory, o);
  EXPECT_TRUE(executor.ok()) << executor.status().ToString();
  if (!executor.ok()) return {};
  if (options.graphs) {
    EXPECT_TRUE((*executor)->EnableGraphs(8).ok());
  }
  if (spec.needs_model_drafter()) {
    EXPECT_TRUE((*executor)->has_drafter());
  }
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 128;
  ec.scheduler.max_num_seqs = 8;
  Engine engine(ec, std::make_unique<CudaModelRunner>(std::move(executor).value(), true, true, spec));
  return ServeToEnd(engine, requests);
}

}  // namespace peregrine::testing
