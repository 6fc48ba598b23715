#include "cuda_model_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

#include "golden.h"

namespace peregrine::testing {

using deepseek_v4::Model;
using deepseek_v4::SequenceState;

Result<std::unique_ptr<SlotModel>> SlotModel::Create(const ModelConfig& config, const Checkpoint& checkpoint,
                                                     const SlotModelOptions& o) {
  ExecutorOptions eo;
  eo.num_slots = o.num_slots;
  eo.max_tokens = o.max_tokens;
  eo.max_context = o.max_context;
  eo.max_logit_rows = o.max_logit_rows;
  eo.block_tokens = o.block_tokens;
  eo.prefix_caching = false;
  eo.batch_invariant = o.batch_invariant;
  eo.kv_cache_fp8 = o.kv_cache_fp8;
  eo.max_verify_rows = o.max_verify_rows;
  eo.max_draft_steps = o.max_draft_steps;
  eo.draft_candidates = o.draft_candidates;
  const KvLayout layout = deepseek_v4::KvGeometry::For(config, o.block_tokens, {2, 2}).Layout();
  const int64_t per_slot = std::max<int64_t>(layout.BlocksFor(o.max_context), 1);
  eo.kv_tokens = o.num_slots * per_slot * layout.block_tokens;
  const deepseek_v4::cuda::WeightLoadOptions weights = o.weights;
  const DeviceParallel parallel = o.parallel;
  const DeviceModelFactory factory = [weights, parallel](const ModelConfig& c, const Checkpoint& ckpt,
                                               const DeviceModelLimits& limits, const DeviceWeightOptions&,
                                               cuda::CachingAllocator& allocator,
                                               cudaStream_t stream) -> Result<std::unique_ptr<DeviceModel>> {
    PG_ASSIGN_OR_RETURN(std::unique_ptr<deepseek_v4::cuda::CudaModel> model,
                        deepseek_v4::cuda::CudaModel::Create(c, ckpt, limits, weights, allocator, stream, parallel));
    return std::unique_ptr<DeviceModel>(std::move(model));
  };
  auto m = std::unique_ptr<SlotModel>(new SlotModel());
  PG_ASSIGN_OR_RETURN(m->executor_, DeviceExecutor::Create(config, checkpoint, factory, eo));
  if (m->executor_->kv_capacity().num_blocks < o.num_slots * per_slot) return Internal("fewer KV blocks than asked for");
  for (int64_t s = 0; s < o.num_slots; ++s) {
    m->tables_.emplace_back();
    for (int64_t j = 0; j < per_slot; ++j) m->tables_.back().push_back(static_cast<int32_t>(s * per_slot + j));
  }
  return m;
}

Status SlotModel::Forward(std::span<const StepChunk> chunks, std::vector<float>* logits) {
  std::vector<ChunkView> views;
  for (const StepChunk& c : chunks) {
    if (c.slot < 0 || c.slot >= static_cast<int32_t>(tables_.size())) return InvalidArgument("slot out of range");
    ChunkView v;
    v.slot = c.slot;
    v.first_position = c.first_position;
    v.num_tokens = static_cast<int64_t>(c.tokens.size());
    v.tokens = c.tokens;
    v.blocks = tables_[static_cast<size_t>(c.slot)];
    v.needs_logits = c.needs_logits;
    v.all_logits = c.all_logits;
    v.tree_parents = c.tree_parents;
    views.push_back(v);
  }
  return executor_->Forward(views, logits);
}

std::vector<float> PrefillLogits(SlotModel& model, int32_t slot, std::span<const int32_t> prompt,
                                 int64_t chunk) {
  std::vector<float> all, part;
  for (size_t begin = 0; begin < prompt.size(); begin += static_cast<size_t>(chunk)) {
    const size_t n = std::min(prompt.size() - begin, static_cast<size_t>(chunk));
    const StepChunk c{slot, static_cast<int64_t>(begin), prompt.subspan(begin, n), true, true};
    const Status s = model.Forward({&c, 1}, &part);
    EXPECT_TRUE(s.ok()) << s.ToString();
    if (!s.ok()) return {};
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

std::vector<double> BatchedDecodeErrors(SlotModel& model, Model& cpu,
                                        std::span<const int32_t> prompt, std::span<const int64_t> lengths,
                                        int32_t first_slot, int64_t chunk, int steps) {
  std::vector<SequenceState> states;
  std::vector<float> ignored;
  for (size_t s = 0; s < lengths.size(); ++s) {
    states.push_back(cpu.NewSequence());
    const auto first = prompt.first(static_cast<size_t>(lengths[s]));
    const Status c = cpu.Forward(states.back(), first, false, &ignored);
    EXPECT_TRUE(c.ok()) << c.ToString();
    for (size_t begin = 0; c.ok() && begin < first.size(); begin += static_cast<size_t>(chunk)) {
      const StepChunk step{first_slot + static_cast<int32_t>(s), static_cast<int64_t>(begin),
                           first.subspan(begin, std::min(first.size() - begin, static_cast<size_t>(chunk))), true,
                           false};
      const Status g = model.Forward({&step, 1}, &ignored);
      EXPECT_TRUE(g.ok()) << g.ToString();
      if (!g.ok()) return {};
    }
    if (!c.ok()) return {};
  }
  std::vector<double> errors;
  for (int step = 0; step < steps; ++step) {
    const size_t batch = std::min<size_t>(1 + static_cast<size_t>(step) % 3, lengths.size());
    std::vector<StepChunk> gpu_chunks;
    std::vector<Model::Chunk> cpu_chunks;
    std::vector<std::array<int32_t, 1>> tokens(batch);
    for (size_t b = 0; b < batch; ++b) {
      tokens[b][0] = prompt[static_cast<size_t>(lengths[b] + step) % prompt.size()];
      gpu_chunks.push_back({first_slot + static_cast<int32_t>(b), states[b].num_tokens, tokens[b], true, false});
      cpu_chunks.push_back({&states[b], tokens[b], false, true});
    }
    std::vector<float> got, want;
    const Status g = model.Forward(gpu_chunks, &got);
    const Status c = cpu.Forward(cpu_chunks, &want);
    EXPECT_TRUE(g.ok()) << g.ToString();
    EXPECT_TRUE(c.ok()) << c.ToString();
    EXPECT_EQ(got.size(), want.size());
    if (!g.ok() || !c.ok() || got.size() != want.size()) return {};
    errors.push_back(RelativeL2(got.data(), want.data(), static_cast<int64_t>(want.size())));
  }
  return errors;
}

}  // namespace peregrine::testing
