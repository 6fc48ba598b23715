// DeepSeek-V4 on the CPU reference backend: loads a checkpoint directory and runs batched
// forwards over chunks of sequences whose state lives in a CpuKvStore (slots, blocks,
// snapshots), so any chunking of a prompt followed by single-token decode gives the same
// logits as one full forward.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "backend/cpu/thread_pool.h"
#include "config/model_config.h"
#include "distributed/communicator.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/layers.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/kv_store.h"
#include "model/host_model.h"
#include "model/step_view.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4 {

class Model final : public HostModel {
 public:
  // Reads DIR/config.json and the safetensors shards; weights stay mapped where stored fp32.
  static Result<std::unique_ptr<Model>> Load(const std::filesystem::path& dir, int num_threads);
  // Builds the model from any Checkpoint (e.g. synthetic weights), which it keeps alive.
  // Sharded (tensor/expert parallel): this process holds `shard`'s part of the weights and
  // sums with the other ranks over `comm` (of shard.size ranks, this one shard.rank), which
  // must outlive the model. Every rank runs every call with the same arguments and gets the
  // same logits; a failed collective fails the call (Unavailable) and leaves the KV state
  // undefined.
  static Result<std::unique_ptr<Model>> Create(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint,
                                               int num_threads, const ShardSpec& shard = {},
                                               distributed::Communicator* comm = nullptr);

  const ModelConfig& config() const override { return config_; }
  // KV rows (window rows and compressed entries) as an FP8 cache in V4's format would give them
  // back (kv_fp8.h): rounded as they are written, so attention reads exactly what such a cache
  // holds (`--kv-cache-dtype fp8`; the pools keep f32). Set before the first forward.
  void set_kv_cache_fp8(bool on) { kv_fp8_rope_dim_ = on ? config_.rope_head_dim : 0; }
  bool kv_cache_fp8() const { return kv_fp8_rope_dim_ > 0; }
  std::string kv_format() const override { return kv_cache_fp8() ? "f32-fp8rows" : "f32"; }
  KvLayout kv_layout(int64_t block_tokens) const override { return Geometry(block_tokens).Layout(); }
  std::unique_ptr<HostKvPools> CreateKvPools(int64_t block_tokens, int32_t num_slots, int32_t num_blocks,
                                             int32_t num_snapshots) const override;
  // The KV geometry at a block size (rounded up to what the layers need).
  KvGeometry Geometry(int64_t block_tokens) const { return KvGeometry::For(config_, block_tokens, KvElementSizes{}); }
  SequenceState NewSequence() const { return SequenceState::Create(config_); }

  // One engine step: every chunk's state lives in `kv` (its slot, block table and
  // snapshots; restores happen first). `logits` gets the requested rows [rows, vocab] in
  // chunk order; a chunk's results do not depend on the others. Fails before touching any
  // state when an id is outside [0, vocab), a chunk is malformed (fed tokens, a block table
  // that does not cover it) or a sequence would pass max_position_embeddings.
  Status Forward(std::span<const ChunkView> chunks, CpuKvStore& kv, std::vector<float>* logits);
  // The same through the runtime's interface (`kv` must be a CpuKvStore).
  Status Forward(std::span<const ChunkView> chunks, HostKvPools& kv, std::vector<float>* logits) override;

  // Speculative decoding (HostModel): a chunk with tree_parents verifies a draft tree and
  // stages its state; CommitTree keeps one root path of it. Draft runs the first MTP layer
  // as a drafter with a state per slot (window rings of its own): it extends that state over
  // the committed rows of the last forward (their final hidden states, with the token after
  // each), then chains: step 1 is the MTP layer's prediction after the last known token,
  // step k + 1 feeds step k's output hidden state and its top token back into the layer
  // (what it writes for the chain is undone). Candidates are the top_k tokens of each step
  // by logprob (log-softmax of the logits), ties to the lower id.
  Status CommitTree(CpuKvStore& kv, int32_t slot, std::span<const int32_t> blocks, std::span<const int32_t> path);
  Status CommitTree(HostKvPools& kv, int32_t slot, std::span<const int32_t> blocks,
                    std::span<const int32_t> path) override;
  // With a block drafter (DSpark's layout, the config's dspark keys) Draft runs it instead:
  // each slot's drafter state follows the committed rows through main_x (their lane-averaged
  // streams at the target layers, projected and normed) run through the stages; then one
  // forward over the block [token after the last row, noise, ...] (causal within the block,
  // undone afterwards) gives min(num_steps, block size) positions' logits, each corrected
  // by the Markov head with the top token before it (the anchor for the first), with the
  // confidence head's score in DepthCandidates::confidence.
  bool has_drafter() const override { return has_mtp() || has_block_drafter(); }
  Status Draft(HostKvPools& kv, std::span<const DraftInput> inputs,
               std::vector<std::vector<speculative::DepthCandidates>>* out) override;

  // One sequence's part of a batched forward.
  struct Chunk {
    SequenceState* state = nullptr;
    std::span<const int32_t> tokens;  // at positions state->num_tokens, +1, ...
    bool all_logits = false;          // logits for every token (whatever needs_logits says)
    bool needs_logits = true;         // false: no logits for this chunk at all
  };

  // Sequences on stores of their own (SequenceState): runs every chunk in one pass
  // (projections, experts and the head batched over all tokens; attention per sequence) and
  // advances the states, as the engine step above does.
  Status Forward(std::span<const Chunk> batch, std::vector<float>* logits);

  // One sequence: logits [T, vocab] when `all_logits`, else [1, vocab] for the last token.
  Status Forward(SequenceState& state, std::span<const int32_t> tokens, bool all_logits,
                 std::vector<float>* logits);

  // Whether the checkpoint's MTP layers were loaded (ModelWeights::mtp).
  bool has_mtp() const { return !weights_.mtp.empty(); }
  // Whether the checkpoint's block drafter was loaded (ModelWeights::block_drafter).
  bool has_block_drafter() const { return weights_.block_drafter.has_value(); }
  // The first MTP layer over a whole sequence from position 0, recomputed from scratch (the
  // reference for drafters): the main model runs over tokens[0, T), and MTP position t
  // (t < T - 1) combines its state at t with the embedding of tokens[t + 1]. `logits` gets
  // [T - 1, vocab], row t predicting the token at t + 2. Unimplemented without MTP
  // weights; InvalidArgument for fewer than 2 tokens or ids outside the vocabulary.
  Status MtpLogits(std::span<const int32_t> tokens, std::vector<float>* logits);

 private:
  Model(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ModelWeights weights, int num_threads,
        distributed::Communicator* comm);
  // The forward over segments that name their own stores.
  // `final_streams` (may be null) gets every token's streams before the head mixer [N, hc, D].
  // `taps` (may be null) gets every token's block-drafter taps [N, taps, D] (the streams after
  // each of dspark_target_layer_ids, averaged over the lanes).
  Status Run(std::span<const Segment> segments, std::span<const int32_t> ids, std::span<const uint8_t> logit_rows,
             std::vector<float>* logits, std::vector<float>* final_streams = nullptr,
             std::vector<float>* taps = nullptr);
  // The block drafter (Draft with a block drafter loaded) on the drafter's stores.
  Status BlockDraft(CpuKvStore& kv, std::span<const DraftInput> inputs,
                    std::vector<std::vector<speculative::DepthCandidates>>* out);
  // The block drafter's stages over rows x [n, D] (each copied to every lane) laid out as
  // `segments` on the drafter's stores: `streams` gets their output [n, hc, D].
  Status BlockStages(std::span<const Segment> segments, std::span<const int32_t> ids, const float* x, int64_t n,
                     std::vector<float>* streams);
  // The first MTP layer over pairs (hidden streams h[i] [hc, D], the token after it) laid out
  // as `segments` on the drafter's stores: `out_streams` gets the layer's output streams
  // [n, hc, D], `logits` one row per wanted pair.
  Status MtpRun(std::span<const Segment> segments, std::span<const float* const> h, std::span<const int32_t> next,
                std::span<const uint8_t> wanted, std::vector<float>* out_streams, std::vector<float>* logits);
  // One decoder layer over `streams` [N, hc, D] in place.
  Status RunLayer(const ModelConfig& c, const LayerWeights& lw, int64_t layer, std::span<const Segment> segments,
                std::span<const int32_t> ids, float* streams, int64_t num_rows);

  // A sub-layer's partial output [N, D] summed over the ranks (nothing when whole).
  Status SumOverRanks(std::vector<float>& partial);
  // The head over rows x [R, D] (normed): this rank's vocabulary part, gathered -> logits [R, vocab].
  Status Head(const float* x, int64_t rows, std::vector<float>* logits);

  ModelConfig config_;
  distributed::Communicator* comm_ = nullptr;  // null: the whole model in this process
  std::unique_ptr<Checkpoint> checkpoint_;  // owns the mappings `weights_` may borrow
  ModelWeights weights_;
  RopeTable rope_main_;
  RopeTable rope_compress_;
  int64_t kv_fp8_rope_dim_ = 0;  // > 0: KV rows round-trip through the FP8 format (its bf16 RoPE dims)
  cpu::ThreadPool pool_;
  std::vector<float> last_streams_;  // [N, hc, D] of the last step with keep_hidden chunks
  std::vector<float> last_taps_;     // [N, taps, D] of that step, with a block drafter
};

// Registers DeepSeek-V4 on the CPU backend under model_type "deepseek_v4".
void RegisterHostModel(HostModelRegistry& registry);

}  // namespace peregrine::deepseek_v4
