#include "cli/generate_command.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "model/deepseek_v4/model.h"

namespace peregrine::cli {

namespace {

struct GenerateOptions {
  std::string model_path;
  std::vector<int32_t> prompt_ids;
  int max_new_tokens = 16;
  int threads = 2;
  int chunk_size = 512;
  int print_logits = 0;  // top-k logits printed per step; 0 prints none
  bool stop_at_eos = false;
};

void PrintTopLogits(const std::vector<float>& logits, int k) {
  std::vector<int> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int>(k, static_cast<int>(order.size()));
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)]; });
  std::printf("  top:");
  for (int i = 0; i < k; ++i) std::printf(" %d:%.6f", order[static_cast<size_t>(i)], logits[static_cast<size_t>(order[static_cast<size_t>(i)])]);
  std::printf("\n");
}

int RunGenerate(const GenerateOptions& o) {
  auto loaded = deepseek_v4::Model::Load(o.model_path, o.threads);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  deepseek_v4::Model& model = **loaded;
  deepseek_v4::SequenceState state = model.NewSequence();
  std::vector<float> logits;
  const std::span<const int32_t> prompt(o.prompt_ids);
  for (size_t begin = 0; begin < prompt.size(); begin += static_cast<size_t>(o.chunk_size)) {
    const size_t n = std::min(prompt.size() - begin, static_cast<size_t>(o.chunk_size));
    Status s = model.Forward(state, prompt.subspan(begin, n), /*all_logits=*/false, &logits);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  const auto& eos = model.config().eos_token_ids;
  std::vector<int32_t> generated;
  for (int step = 0; step < o.max_new_tokens; ++step) {
    const int32_t token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    generated.push_back(token);
    if (o.print_logits > 0) {
      std::printf("step %d token %d\n", step, token);
      PrintTopLogits(logits, o.print_logits);
    }
    if (o.stop_at_eos && std::find(eos.begin(), eos.end(), token) != eos.end()) break;
    if (step + 1 == o.max_new_tokens) break;
    const int32_t next[] = {token};
    Status s = model.Forward(state, next, /*all_logits=*/false, &logits);
    if (!s.ok()) {
      std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  for (size_t i = 0; i < generated.size(); ++i) std::printf(i ? " %d" : "%d", generated[i]);
  std::printf("\n");
  return 0;
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Greedy decoding from prompt token ids (CPU backend)");
  cmd->add_option("--model-path", options->model_path, "Model directory (config.json + safetensors)")->required();
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, space or comma separated")
      ->required()
      ->delimiter(',');
  cmd->add_option("--max-new-tokens", options->max_new_tokens, "Tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--threads", options->threads, "CPU threads")->check(CLI::Range(1, 256));
  cmd->add_option("--chunk-size", options->chunk_size, "Prefill chunk size")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--print-logits", options->print_logits, "Print the top-K logits of every step");
  cmd->add_flag("--stop-at-eos", options->stop_at_eos, "Stop after an end-of-sequence token");
  cmd->callback([options] {
    const int rc = RunGenerate(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
