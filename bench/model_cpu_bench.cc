// CPU decode throughput of a small DeepSeek-V4 configuration (every layer type, hash and
// learned MoE, mHC with 4 streams) with synthetic weights. Prints prefill and decode
// tokens/s and the weight bytes a decode step streams, and appends a JSON line to
// --out (default bench/results/model_cpu.jsonl).
//
//   model_cpu_bench [--threads 2] [--prompt 256] [--decode 64] [--out FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "model/deepseek_v4/model.h"
#include "model/synthetic_checkpoint.h"

namespace {

peregrine::ModelConfig SmallV4() {
  using peregrine::AttentionType;
  using peregrine::MoeType;
  peregrine::ModelConfig c;
  c.vocab_size = 32768;
  c.hidden_size = 1024;
  c.num_layers = 4;
  c.num_heads = 16;
  c.head_dim = 256;
  c.rope_head_dim = 64;
  c.q_lora_rank = 384;
  c.o_groups = 4;
  c.o_lora_rank = 256;
  c.sliding_window = 128;
  c.max_position_embeddings = 1 << 20;
  c.layer_types = {AttentionType::kSliding, AttentionType::kCompressedSparse, AttentionType::kHeavilyCompressed,
                   AttentionType::kCompressedSparse};
  c.mlp_layer_types = {MoeType::kHash, MoeType::kLearned, MoeType::kLearned, MoeType::kLearned};
  c.index_n_heads = 16;
  c.index_head_dim = 64;
  c.index_topk = 128;
  c.num_experts = 32;
  c.num_experts_per_tok = 4;
  c.moe_intermediate_size = 512;
  c.routed_scaling_factor = 1.5;
  c.swiglu_limit = 10.0;
  c.hc_mult = 4;
  c.rope_compress = {160000.0, true, 16.0, 65536, 32.0, 1.0, 1.0};
  c.eos_token_ids = {1};
  return c;
}

// Bytes of weights one decode token reads: everything but the unused experts and embed rows.
double DecodeWeightBytes(const peregrine::ModelConfig& c) {
  const double d = static_cast<double>(c.hidden_size);
  const double hd = static_cast<double>(c.head_dim);
  double per_layer = d * c.q_lora_rank + static_cast<double>(c.q_lora_rank) * c.num_heads * hd + d * hd +
                     static_cast<double>(c.num_heads) * hd * c.o_lora_rank + static_cast<double>(c.o_groups) * c.o_lora_rank * d +
                     d * c.num_experts + (c.num_experts_per_tok + 1) * 3.0 * d * c.moe_intermediate_size;
  double total = per_layer * static_cast<double>(c.num_layers) + d * static_cast<double>(c.vocab_size);
  return total * 4.0;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, prompt_len = 256, decode_len = 64;
  std::string out = std::string(PEREGRINE_BENCH_RESULTS) + "/model_cpu.jsonl";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--threads")) threads = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--prompt")) prompt_len = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--decode")) decode_len = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--out")) out = argv[i + 1];
  }
  const peregrine::ModelConfig config = SmallV4();
  auto model = peregrine::deepseek_v4::Model::Create(config, peregrine::MakeSyntheticCheckpoint(config, 7), threads);
  if (!model.ok()) {
    std::fprintf(stderr, "%s\n", model.status().ToString().c_str());
    return 1;
  }
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = 2 + (i * 7919) % 30000;
  auto state = (*model)->NewSequence();
  std::vector<float> logits;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (!(*model)->Forward(state, prompt, false, &logits).ok()) return 1;
  const auto t1 = Clock::now();
  for (int i = 0; i < decode_len; ++i) {
    const int32_t next[] = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    if (!(*model)->Forward(state, next, false, &logits).ok()) return 1;
  }
  const auto t2 = Clock::now();
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const double decode_tps = decode_len / decode_s;
  const double bytes = DecodeWeightBytes(config);
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"bench\":\"model_cpu\",\"config\":\"small_v4_1024x4\",\"threads\":%d,\"prompt\":%d,\"decode\":%d,"
                "\"prefill_tok_s\":%.1f,\"decode_tok_s\":%.2f,\"decode_weight_bytes\":%.0f,\"decode_gb_s\":%.2f}",
                threads, prompt_len, decode_len, prompt_len / prefill_s, decode_tps, bytes, bytes * decode_tps / 1e9);
  std::printf("%s\n", line);
  std::ofstream(out, std::ios::app) << line << "\n";
  return 0;
}
