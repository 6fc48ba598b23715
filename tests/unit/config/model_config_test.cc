#include "config/model_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace peregrine {
namespace {

using AT = AttentionType;

// What transformers 5.17 `save_pretrained` writes for a tiny DeepseekV4Config.
constexpr const char* kHfTinyConfig = R"({
  "architectures": ["DeepseekV4ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 0,
  "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
  "compress_rope_theta": 160000.0, "dtype": "float32", "eos_token_id": 1, "hc_eps": 1e-06,
  "hc_mult": 2, "hc_sinkhorn_iters": 20, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64,
  "index_head_dim": 16, "index_n_heads": 2, "index_topk": 4, "initializer_range": 0.02,
  "layer_types": ["sliding_attention", "compressed_sparse_attention",
                  "heavily_compressed_attention", "compressed_sparse_attention"],
  "max_position_embeddings": 256, "mlp_bias": false,
  "mlp_layer_types": ["hash_moe", "hash_moe", "hash_moe", "moe"],
  "model_type": "deepseek_v4", "moe_intermediate_size": 32, "n_routed_experts": 4,
  "n_shared_experts": 1, "norm_topk_prob": true, "num_attention_heads": 4,
  "num_experts_per_tok": 2, "num_hidden_layers": 4, "num_key_value_heads": 1,
  "num_nextn_predict_layers": 0, "o_groups": 2, "o_lora_rank": 16,
  "output_router_logits": false, "pad_token_id": null, "partial_rotary_factor": 0.5,
  "q_lora_rank": 32, "qk_rope_head_dim": 16, "rms_norm_eps": 1e-06,
  "rope_parameters": {
    "compress": {"attention_factor": 1.0, "beta_fast": 32, "beta_slow": 1, "factor": 4.0,
                 "original_max_position_embeddings": 64, "partial_rotary_factor": 0.5,
                 "rope_theta": 160000.0, "rope_type": "yarn", "type": "yarn"},
    "main": {"partial_rotary_factor": 0.5, "rope_theta": 10000.0, "rope_type": "default"}},
  "rope_theta": 10000.0, "routed_scaling_factor": 1.5, "router_aux_loss_coef": 0.001,
  "router_jitter_noise": 0.0, "scoring_func": "sqrtsoftplus", "sliding_window": 16,
  "swiglu_limit": 10.0, "tie_word_embeddings": false, "transformers_version": "5.17.0",
  "use_cache": true, "vocab_size": 256
})";

// The published V4-Flash config.json (deepseek-v4.md §1.1).
nlohmann::json FlashConfig() {
  nlohmann::json ratios = {0, 0};
  for (int i = 0; i < 20; ++i) ratios.insert(ratios.end(), {4, 128});
  ratios.insert(ratios.end(), {4, 0});
  return {
      {"architectures", {"DeepseekV4ForCausalLM"}},
      {"model_type", "deepseek_v4"},
      {"torch_dtype", "bfloat16"},
      {"transformers_version", "4.57.1"},
      {"vocab_size", 129280},
      {"hidden_size", 4096},
      {"num_hidden_layers", 43},
      {"num_nextn_predict_layers", 1},
      {"num_attention_heads", 64},
      {"num_key_value_heads", 1},
      {"head_dim", 512},
      {"qk_rope_head_dim", 64},
      {"q_lora_rank", 1024},
      {"o_lora_rank", 1024},
      {"o_groups", 8},
      {"sliding_window", 128},
      {"compress_ratios", ratios},
      {"compress_rope_theta", 160000},
      {"rope_theta", 10000},
      {"max_position_embeddings", 1048576},
      {"rope_scaling",
       {{"type", "yarn"},
        {"factor", 16},
        {"original_max_position_embeddings", 65536},
        {"beta_fast", 32},
        {"beta_slow", 1}}},
      {"index_n_heads", 64},
      {"index_head_dim", 128},
      {"index_topk", 512},
      {"n_routed_experts", 256},
      {"n_shared_experts", 1},
      {"num_experts_per_tok", 6},
      {"moe_intermediate_size", 2048},
      {"scoring_func", "sqrtsoftplus"},
      {"topk_method", "noaux_tc"},
      {"norm_topk_prob", true},
      {"routed_scaling_factor", 1.5},
      {"num_hash_layers", 3},
      {"swiglu_limit", 10.0},
      {"hidden_act", "silu"},
      {"hc_mult", 4},
      {"hc_sinkhorn_iters", 20},
      {"hc_eps", 1e-6},
      {"rms_norm_eps", 1e-6},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"bos_token_id", 0},
      {"eos_token_id", 1},
      {"expert_dtype", "fp4"},
      {"quantization_config",
       {{"quant_method", "fp8"},
        {"fmt", "e4m3"},
        {"scale_fmt", "ue8m0"},
        {"activation_scheme", "dynamic"},
        {"weight_block_size", {128, 128}}}},
  };
}

Result<ModelConfig> Parse(const nlohmann::json& j) { return ParseModelConfig(j.dump()); }

// Parses `base` with `key` set to `value` (null erases it) and expects `code` naming `needle`.
void ExpectError(nlohmann::json base, const std::string& key, const nlohmann::json& value,
                 StatusCode code, const std::string& needle) {
  if (value.is_null()) {
    base.erase(key);
  } else {
    base[key] = value;
  }
  const auto r = Parse(base);
  ASSERT_FALSE(r.ok()) << key << " = " << value.dump();
  EXPECT_EQ(r.status().code(), code) << r.status().ToString();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().ToString();
}

TEST(ModelConfigTest, HfSavedTinyConfig) {
  const auto r = ParseModelConfig(kHfTinyConfig);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = *r;
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.rope_head_dim, 16);
  EXPECT_EQ(c.q_lora_rank, 32);
  EXPECT_EQ(c.o_groups, 2);
  EXPECT_EQ(c.o_lora_rank, 16);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_EQ(c.layer_types, (std::vector<AT>{AT::kSliding, AT::kCompressedSparse,
                                            AT::kHeavilyCompressed, AT::kCompressedSparse}));
  EXPECT_EQ(c.mlp_layer_types, (std::vector<MoeType>{MoeType::kHash, MoeType::kHash, MoeType::kHash,
                                                     MoeType::kLearned}));
  EXPECT_EQ(c.compress_ratio_csa, 4);
  EXPECT_EQ(c.compress_ratio_hca, 8);
  EXPECT_EQ(c.CompressRatio(0), 0);
  EXPECT_EQ(c.CompressRatio(1), 4);
  EXPECT_EQ(c.CompressRatio(2), 8);
  EXPECT_EQ(c.index_n_heads, 2);
  EXPECT_EQ(c.index_head_dim, 16);
  EXPECT_EQ(c.index_topk, 4);
  EXPECT_EQ(c.num_experts, 4);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.routed_scaling_factor, 1.5);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.swiglu_limit, 10.0);
  EXPECT_EQ(c.hc_mult, 2);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.hc_eps, 1e-6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_main, (RopeConfig{10000.0, false, 1.0, 0, 32.0, 1.0, 1.0}));
  EXPECT_EQ(c.rope_compress, (RopeConfig{160000.0, true, 4.0, 64, 32.0, 1.0, 1.0}));
  EXPECT_EQ(&c.Rope(0), &c.rope_main);
  EXPECT_EQ(&c.Rope(2), &c.rope_compress);
  EXPECT_EQ(c.bos_token_id, 0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
  EXPECT_EQ(c.num_nextn_predict_layers, 0);
}

TEST(ModelConfigTest, OfficialFlashConfig) {
  const auto r = Parse(FlashConfig());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = *r;
  ASSERT_EQ(c.layer_types.size(), 43u);  // the 44th ratio is the MTP slot
  EXPECT_EQ(c.layer_types[0], AT::kSliding);
  EXPECT_EQ(c.layer_types[1], AT::kSliding);
  for (int64_t i = 2; i < 43; ++i) EXPECT_EQ(c.CompressRatio(i), i % 2 == 0 ? 4 : 128) << i;
  ASSERT_EQ(c.mlp_layer_types.size(), 43u);
  for (size_t i = 0; i < 43; ++i)
    EXPECT_EQ(c.mlp_layer_types[i], i < 3 ? MoeType::kHash : MoeType::kLearned) << i;
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.rope_main, (RopeConfig{10000.0, false, 1.0, 0, 32.0, 1.0, 1.0}));
  EXPECT_EQ(c.rope_compress, (RopeConfig{160000.0, true, 16.0, 65536, 32.0, 1.0, 1.0}));
  EXPECT_EQ(&c.Rope(1), &c.rope_main);
  EXPECT_EQ(&c.Rope(2), &c.rope_compress);
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_experts_per_tok, 6);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.num_nextn_predict_layers, 1);
  EXPECT_EQ(c.max_position_embeddings, 1048576);
}

TEST(ModelConfigTest, DefaultsMatchHf) {
  // DeepseekV4Config() with nothing set: V4-Pro layer pattern, plain RoPE on both tables.
  const auto r = ParseModelConfig(R"({"model_type": "deepseek_v4"})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ModelConfig& c = *r;
  ASSERT_EQ(c.layer_types.size(), 43u);
  EXPECT_EQ(c.layer_types[0], AT::kHeavilyCompressed);
  EXPECT_EQ(c.layer_types[1], AT::kHeavilyCompressed);
  EXPECT_EQ(c.layer_types[2], AT::kHeavilyCompressed);
  EXPECT_EQ(c.layer_types[3], AT::kCompressedSparse);
  EXPECT_EQ(c.layer_types[4], AT::kHeavilyCompressed);
  EXPECT_EQ(c.layer_types[42], AT::kHeavilyCompressed);
  EXPECT_EQ(c.mlp_layer_types[2], MoeType::kHash);
  EXPECT_EQ(c.mlp_layer_types[3], MoeType::kLearned);
  EXPECT_EQ(c.rope_head_dim, 64);
  EXPECT_EQ(c.rope_compress, (RopeConfig{160000.0, false, 1.0, 0, 32.0, 1.0, 1.0}));
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{1});
}

TEST(ModelConfigTest, FlatRopeParametersAndVariants) {
  // HF: a flat rope dict is the compress table, at compress_rope_theta, attention_factor 1.
  const auto r = ParseModelConfig(R"({"model_type": "deepseek_v4", "num_hidden_layers": 4,
      "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 5.0,
                          "original_max_position_embeddings": 64},
      "partial_rotary_factor": 0.25, "eos_token_id": [1, 2], "bos_token_id": null,
      "num_hash_layers": 1, "compress_rate_hca": 64})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rope_head_dim, 128);
  EXPECT_EQ(r->rope_compress, (RopeConfig{160000.0, true, 4.0, 64, 32.0, 1.0, 1.0}));
  EXPECT_EQ(r->rope_main.theta, 10000.0);
  EXPECT_FALSE(r->rope_main.yarn);
  EXPECT_EQ(r->eos_token_ids, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(r->bos_token_id, -1);
  EXPECT_EQ(r->mlp_layer_types, (std::vector<MoeType>{MoeType::kHash, MoeType::kLearned,
                                                      MoeType::kLearned, MoeType::kLearned}));
  EXPECT_EQ(r->CompressRatio(0), 64);
}

TEST(ModelConfigTest, NestedRopeFallsBackToRopeTheta) {
  // HF fills a nested table's missing rope_theta from the top-level rope_theta and its
  // original length from max_position_embeddings.
  const auto r = ParseModelConfig(R"({"model_type": "deepseek_v4", "num_hidden_layers": 3,
      "rope_parameters": {"main": {"rope_type": "default"},
                          "compress": {"rope_type": "yarn", "factor": 2.0}}})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rope_compress, (RopeConfig{10000.0, true, 2.0, 1048576, 32.0, 1.0, 1.0}));
}

TEST(ModelConfigTest, LegacyRopeScalingTakesPrecedence) {
  nlohmann::json j = FlashConfig();
  j["rope_parameters"] = {{"rope_type", "default"}};
  j["rope_scaling"]["beta_fast"] = 0;  // HF: `beta_fast or 32`
  j["rope_scaling"]["attention_factor"] = 0.5;
  const auto r = Parse(j);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rope_compress, (RopeConfig{160000.0, true, 16.0, 65536, 32.0, 1.0, 0.5}));
}

TEST(ModelConfigTest, HfAndOfficialDialectsAgree) {
  // The tiny HF config rewritten with the official keys parses to the same value.
  nlohmann::json j = nlohmann::json::parse(kHfTinyConfig);
  for (const char* key : {"layer_types", "mlp_layer_types", "compress_rates", "rope_parameters",
                          "partial_rotary_factor"})
    j.erase(key);
  j["compress_ratios"] = {0, 4, 8, 4, 0};
  j["compress_rate_hca"] = 8;
  j["num_hash_layers"] = 3;
  j["rope_scaling"] = {{"type", "yarn"},
                       {"factor", 4.0},
                       {"original_max_position_embeddings", 64},
                       {"beta_fast", 32},
                       {"beta_slow", 1}};
  const auto official = Parse(j);
  const auto hf = ParseModelConfig(kHfTinyConfig);
  ASSERT_TRUE(official.ok()) << official.status().ToString();
  ASSERT_TRUE(hf.ok());
  EXPECT_TRUE(*official == *hf);
}

TEST(ModelConfigTest, ModelTypeErrors) {
  const auto bad = ParseModelConfig(R"({"model_type": "llama"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("unknown model_type 'llama'"), std::string::npos);
  EXPECT_FALSE(ParseModelConfig(R"({"hidden_size": 4})").ok());
  EXPECT_FALSE(ParseModelConfig(R"({"model_type": 3})").ok());
}

TEST(ModelConfigTest, MalformedJson) {
  for (const char* text :
       {"", "{", "[1, 2]", "\"deepseek_v4\"", "{\"model_type\": \"deepseek_v4\",}",
        "{\"model_type\": \"deepseek_v4\"} trailing"}) {
    const auto r = ParseModelConfig(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(ModelConfigTest, BadValuesNameTheKey) {
  const auto inv = StatusCode::kInvalidArgument;
  const auto unimpl = StatusCode::kUnimplemented;
  const nlohmann::json flash = FlashConfig();
  ExpectError(flash, "hidden_size", "4096", inv, "hidden_size");
  ExpectError(flash, "hidden_size", 0, inv, "hidden_size");
  ExpectError(flash, "num_hidden_layers", -1, inv, "num_hidden_layers");
  ExpectError(flash, "num_hidden_layers", 1000000000, inv, "num_hidden_layers");
  ExpectError(flash, "head_dim", 1.5, inv, "head_dim");
  ExpectError(flash, "vocab_size", 1e30, inv, "vocab_size");
  ExpectError(flash, "o_groups", 7, inv, "o_groups");
  ExpectError(flash, "qk_rope_head_dim", 63, inv, "rope head dim");
  ExpectError(flash, "qk_rope_head_dim", 256, inv, "index_head_dim");
  ExpectError(flash, "num_experts_per_tok", 300, inv, "num_experts_per_tok");
  ExpectError(flash, "sliding_window", 64, inv, "sliding_window");
  ExpectError(flash, "compress_ratios", nlohmann::json::array({0, 4}), inv, "compress_ratios");
  ExpectError(flash, "compress_ratios", nlohmann::json(std::vector<int>(44, 16)), inv,
              "compress_ratios[0]");
  ExpectError(flash, "layer_types", nlohmann::json(std::vector<std::string>(43, "full_attention")),
              inv, "layer_types[0]");
  ExpectError(flash, "mlp_layer_types", nlohmann::json(std::vector<std::string>(43, "dense")), inv,
              "mlp_layer_types[0]");
  ExpectError(flash, "compress_rates", {{"dense", 2}}, inv, "compress_rates.dense");
  ExpectError(flash, "partial_rotary_factor", 0.25, inv, "qk_rope_head_dim");
  ExpectError(flash, "eos_token_id", 129280, inv, "eos_token_id");
  ExpectError(flash, "eos_token_id", nlohmann::json::array({1, "x"}), inv, "eos_token_id[1]");
  ExpectError(flash, "norm_topk_prob", 1, inv, "norm_topk_prob");
  ExpectError(flash, "rms_norm_eps", 0.0, inv, "rms_norm_eps");
  ExpectError(flash, "scoring_func", "softmax", unimpl, "scoring_func");
  ExpectError(flash, "scoring_func", "sigmoid", unimpl, "scoring_func");
  ExpectError(flash, "scoring_func", "tanh", unimpl, "scoring_func");
  ExpectError(flash, "hidden_act", "gelu", unimpl, "hidden_act");
  ExpectError(flash, "num_key_value_heads", 8, unimpl, "num_key_value_heads");
  ExpectError(flash, "tie_word_embeddings", true, unimpl, "tie_word_embeddings");
  ExpectError(flash, "rope_scaling", {{"type", "linear"}, {"factor", 2.0}}, unimpl, "linear");
  ExpectError(flash, "rope_scaling", {{"type", "yarn"}}, inv, "rope_scaling.factor");
  ExpectError(flash, "rope_scaling", "yarn", inv, "rope_scaling");
  ExpectError(flash, "rope_scaling", {{"type", "yarn"}, {"factor", -2.0}}, inv, "factor");
  ExpectError(flash, "rope_theta", -1.0, inv, "rope_theta");

  nlohmann::json nested = nlohmann::json::parse(kHfTinyConfig);
  ExpectError(nested, "rope_parameters", {{"main", {{"rope_type", "default"}}}}, inv,
              "'main' and 'compress'");
  nested["rope_parameters"]["compress"]["partial_rotary_factor"] = 0.25;
  ExpectError(nested, "model_type", "deepseek_v4", inv,
              "rope_parameters.compress.partial_rotary_factor");
}

// DSpark's block-drafter keys (docs/decisions/0005-block-drafter-format.md).
TEST(ModelConfigTest, BlockDrafterKeys) {
  nlohmann::json flash = FlashConfig();
  auto plain = ParseModelConfig(flash.dump());
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_FALSE(plain->has_block_drafter());
  flash["dspark_block_size"] = 5;
  flash["dspark_noise_token_id"] = 128799;
  flash["dspark_target_layer_ids"] = {40, 41, 42};
  flash["dspark_markov_rank"] = 256;
  flash["num_nextn_predict_layers"] = 3;
  auto c = ParseModelConfig(flash.dump());
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->has_block_drafter());
  EXPECT_EQ(c->dspark_block_size, 5);
  EXPECT_EQ(c->dspark_noise_token_id, 128799);
  EXPECT_EQ(c->dspark_target_layer_ids, (std::vector<int64_t>{40, 41, 42}));
  EXPECT_EQ(c->dspark_markov_rank, 256);
  EXPECT_EQ(c->num_nextn_predict_layers, 3);
  // The other spelling of the stage count.
  nlohmann::json other = flash;
  other.erase("num_nextn_predict_layers");
  other["n_mtp_layers"] = 3;
  auto o = ParseModelConfig(other.dump());
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->num_nextn_predict_layers, 3);

  const auto inv = StatusCode::kInvalidArgument;
  ExpectError(flash, "dspark_block_size", 0.5, inv, "dspark_block_size");
  ExpectError(flash, "dspark_block_size", 200, inv, "dspark_block_size");
  ExpectError(flash, "dspark_noise_token_id", 129280, inv, "dspark_noise_token_id");
  ExpectError(flash, "dspark_target_layer_ids", nlohmann::json::array({40, 43}), inv, "dspark_target_layer_ids");
  ExpectError(flash, "dspark_target_layer_ids", nlohmann::json::array(), inv, "dspark_target_layer_ids");
  ExpectError(flash, "dspark_target_layer_ids", 40, inv, "dspark_target_layer_ids");
  ExpectError(flash, "dspark_markov_rank", 0, inv, "dspark_markov_rank");
  ExpectError(flash, "num_nextn_predict_layers", 0, inv, "num_nextn_predict_layers");
}

TEST(ModelConfigTest, LoadFromDirectory) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("peregrine_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto missing = LoadModelConfig(dir);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  { std::ofstream(dir / "config.json") << R"({"model_type": "qwen2"})"; }
  const auto wrong = LoadModelConfig(dir);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(wrong.status().message().find("unknown model_type 'qwen2'"), std::string::npos);
  { std::ofstream(dir / "config.json") << kHfTinyConfig; }
  const auto ok = LoadModelConfig(dir);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->num_layers, 4);
  std::filesystem::remove_all(dir);
}

// The config shipped for synthetic-weight runs parses to the same model as the published one.
TEST(ModelConfigTest, ShippedFlashConfigFileMatches) {
  const auto file = LoadModelConfig(std::filesystem::path(PEREGRINE_SOURCE_DIR) / "bench" / "configs" / "deepseek-v4-flash");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  const auto published = Parse(FlashConfig());
  ASSERT_TRUE(published.ok());
  EXPECT_EQ(file->layer_types, published->layer_types);
  EXPECT_EQ(file->mlp_layer_types, published->mlp_layer_types);
  EXPECT_EQ(file->rope_compress, published->rope_compress);
  EXPECT_EQ(file->hidden_size, 4096);
  EXPECT_EQ(file->index_topk, 512);
  EXPECT_EQ(file->o_groups, 8);
}

}  // namespace
}  // namespace peregrine
