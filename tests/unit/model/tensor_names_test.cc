#include "model/tensor_names.h"

#include <gtest/gtest.h>

namespace peregrine {
namespace {

TEST(TensorNamesTest, SavedHfNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.embed_tokens.weight", "embed.weight"},
      {"head.weight", "head.weight"},
      {"lm_head.weight", "head.weight"},
      {"model.norm.weight", "norm.weight"},
      {"model.hc_head.hc_fn", "hc_head_fn"},
      {"model.hc_head.hc_base", "hc_head_base"},
      {"model.hc_head.hc_scale", "hc_head_scale"},
      {"model.layers.0.attn.norm.weight", "layers.0.attn.kv_norm.weight"},
      {"model.layers.7.attn.compressor.norm.weight", "layers.7.attn.compressor.norm.weight"},
      {"model.layers.7.attn.indexer.compressor.ape", "layers.7.attn.indexer.compressor.ape"},
      {"model.layers.42.ffn.experts.255.w2.weight", "layers.42.ffn.experts.255.w2.weight"},
      {"model.layers.3.hc_ffn_scale", "layers.3.hc_ffn_scale"},
  };
  for (const auto& [stored, canonical] : cases) EXPECT_EQ(CanonicalTensorName(stored), canonical);
}

TEST(TensorNamesTest, OfficialNamesAreCanonical) {
  for (const char* name :
       {"embed.weight", "hc_head_fn", "layers.2.attn.kv_norm.weight", "layers.2.attn.wq_a.scale",
        "layers.3.ffn.experts.0.w1.scale", "layers.0.ffn.gate.tid2eid", "mtp.0.e_proj.weight",
        "mtp.0.attn.norm.weight", "mtp.0.norm.weight", "layers.x.attn.norm.weight", "layers.",
        "unknown.thing"})
    EXPECT_EQ(CanonicalTensorName(name), name);
}

TEST(TensorNamesTest, HfModuleNames) {
  const std::pair<const char*, const char*> cases[] = {
      {"model.layers.1.self_attn.sinks", "layers.1.attn.attn_sink"},
      {"model.layers.1.self_attn.q_a_norm.weight", "layers.1.attn.q_norm.weight"},
      {"model.layers.1.self_attn.kv_norm.weight", "layers.1.attn.kv_norm.weight"},
      {"model.layers.1.self_attn.o_b_proj.weight", "layers.1.attn.wo_b.weight"},
      {"model.layers.1.self_attn.compressor.kv_norm.weight",
       "layers.1.attn.compressor.norm.weight"},
      {"model.layers.1.self_attn.compressor.position_bias", "layers.1.attn.compressor.ape"},
      {"model.layers.1.self_attn.compressor.indexer.gate_proj.weight",
       "layers.1.attn.indexer.compressor.wgate.weight"},
      {"model.layers.1.self_attn.compressor.indexer.q_b_proj.weight",
       "layers.1.attn.indexer.wq_b.weight"},
      {"model.layers.1.mlp.gate.tid2eid", "layers.1.ffn.gate.tid2eid"},
      {"model.layers.1.mlp.shared_experts.up_proj.weight", "layers.1.ffn.shared_experts.w3.weight"},
      {"model.layers.1.input_layernorm.weight", "layers.1.attn_norm.weight"},
      {"model.layers.1.post_attention_layernorm.weight", "layers.1.ffn_norm.weight"},
      {"model.layers.1.ffn_hc.base", "layers.1.hc_ffn_base"},
      // Block scales follow their weight.
      {"model.layers.1.self_attn.q_a_proj.weight_scale_inv", "layers.1.attn.wq_a.scale"},
      {"model.layers.1.mlp.shared_experts.gate_proj.scale", "layers.1.ffn.shared_experts.w1.scale"},
      {"layers.1.attn.wkv.weight_scale_inv", "layers.1.attn.wkv.scale"},
  };
  for (const auto& [stored, canonical] : cases) EXPECT_EQ(CanonicalTensorName(stored), canonical);
}

TEST(TensorNamesTest, FusedExperts) {
  auto gate_up = MapStoredTensor("model.layers.4.mlp.experts.gate_up_proj", Shape{3, 8, 5});
  ASSERT_TRUE(gate_up.ok());
  ASSERT_EQ(gate_up->size(), 6u);
  EXPECT_EQ((*gate_up)[2].name, "layers.4.ffn.experts.1.w1.weight");
  EXPECT_EQ((*gate_up)[2].element_offset, 40);
  EXPECT_EQ((*gate_up)[3].name, "layers.4.ffn.experts.1.w3.weight");
  EXPECT_EQ((*gate_up)[3].element_offset, 60);
  EXPECT_EQ((*gate_up)[3].shape, (Shape{4, 5}));
  auto down = MapStoredTensor("model.layers.4.mlp.experts.down_proj", Shape{3, 5, 4});
  ASSERT_TRUE(down.ok());
  ASSERT_EQ(down->size(), 3u);
  EXPECT_EQ((*down)[2].name, "layers.4.ffn.experts.2.w2.weight");
  EXPECT_EQ((*down)[2].element_offset, 40);
  EXPECT_FALSE(MapStoredTensor("model.layers.4.mlp.experts.gate_up_proj", Shape{3, 7, 5}).ok());
  EXPECT_FALSE(MapStoredTensor("model.layers.4.mlp.experts.down_proj", Shape{15, 4}).ok());
  auto plain = MapStoredTensor("model.layers.4.attn.wq_a.weight", Shape{2, 3});
  ASSERT_TRUE(plain.ok());
  ASSERT_EQ(plain->size(), 1u);
  EXPECT_EQ((*plain)[0].name, "layers.4.attn.wq_a.weight");
  EXPECT_EQ((*plain)[0].shape, (Shape{2, 3}));
}

}  // namespace
}  // namespace peregrine
