#include "model/deepseek_v4/demo_model.h"

#include "model/synthetic_checkpoint.h"

namespace peregrine::deepseek_v4 {

ModelConfig DemoModelConfig() {
  ModelConfig c;
  c.vocab_size = 129280;
  c.hidden_size = 128;
  c.num_layers = 4;
  c.num_heads = 4;
  c.head_dim = 128;
  c.rope_head_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 64;
  c.sliding_window = 128;
  c.max_position_embeddings = 16384;
  c.layer_types = {AttentionType::kSliding, AttentionType::kCompressedSparse, AttentionType::kHeavilyCompressed,
                   AttentionType::kCompressedSparse};
  c.mlp_layer_types = {MoeType::kHash, MoeType::kLearned, MoeType::kLearned, MoeType::kLearned};
  c.compress_ratio_csa = 4;
  c.compress_ratio_hca = 128;
  c.index_n_heads = 4;
  c.index_head_dim = 64;
  c.index_topk = 64;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 256;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.hc_mult = 4;
  c.rope_main = {10000.0, false, 1.0, 0, 32.0, 1.0, 1.0};
  c.rope_compress = {160000.0, true, 16.0, 65536, 32.0, 1.0, 1.0};
  c.bos_token_id = 0;
  c.eos_token_ids = {1};
  return c;
}

Result<std::unique_ptr<Model>> LoadDemoModel(int num_threads) {
  ModelConfig config = DemoModelConfig();
  auto checkpoint = MakeSyntheticCheckpoint(config, /*seed=*/20260424);
  return Model::Create(std::move(config), std::move(checkpoint), num_threads);
}

}  // namespace peregrine::deepseek_v4
