#include "cli/compat_flags.h"

#include <string>

namespace peregrine::cli {


void AddCompatFlags(CLI::App& cmd, ServeOptions& o) {
  // vLLM: `vllm serve MODEL` and --model; SGLang: --model-path (Peregrine's own).
  cmd.add_option("model", o.model_path, "Model directory (as --model-path)");
  cmd.add_option("--model", o.model_path, "Model directory (vLLM's name for --model-path)");
  cmd.add_option("--context-length", o.max_model_len, "SGLang's name for --max-model-len")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
  cmd.add_option("--tensor-parallel-size,--tp,--tp-size", o.tensor_parallel_size,
                 "Ranks to shard the model over, one process each (one GPU each on --device cuda)")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--dtype", o.dtype, "Activation dtype (the model's bf16)")
      ->check(CLI::IsMember({"auto", "bfloat16", "bf16"}));
  cmd.add_option("--quantization,-q", o.quantization,
                 "Weight format: none keeps bf16 dense projections, fp8 keeps them FP8 (as --dense-format fp8)")
      ->check(CLI::IsMember({"none", "fp8"}));
  cmd.add_option("--kv-cache-dtype", o.kv_cache_dtype,
                 "KV cache dtype: auto (bf16 pools on CUDA) or fp8 (V4's FP8 format: FP8 entries on CUDA)")
      ->check(CLI::IsMember({"auto", "bf16", "bfloat16", "fp8", "fp8_e4m3"}));
  cmd.add_option("--chat-template", o.chat_template, "A Jinja chat template")
      ->check(CLI::Validator(
          [](std::string&) {
            return std::string("the DeepSeek-V4 chat encoding is built in; a --chat-template file is not supported "
                               "(omit the flag)");
          },
          "", "not supported"));
  cmd.add_option("--reasoning-parser", o.reasoning_parser, "Reasoning parser (DeepSeek-V4's <think> blocks)")
      ->check(CLI::IsMember({"deepseek_v4", "deepseek-v4", "deepseek_r1", "deepseek-r1"}));
  cmd.add_option("--tool-call-parser", o.tool_call_parser, "Tool-call parser (DeepSeek-V4's DSML)")
      ->check(CLI::IsMember({"deepseek_v4", "deepseek-v4", "deepseekv4", "dsml"}));
  cmd.add_flag("--trust-remote-code", o.trust_remote_code,
               "Accepted: the model is built in, no code from the checkpoint ever runs");
  cmd.add_flag("--enable-chunked-prefill", o.enable_chunked_prefill, "Accepted: prefill is always chunked");
  cmd.add_option("--log-level", o.log_level, "debug, info, warning or error")
      ->check(CLI::IsMember({"debug", "info", "warning", "warn", "error"}, CLI::ignore_case))
      ->capture_default_str();
  auto* disable = cmd.add_flag("--disable-log-requests", o.disable_log_requests, "No line per request");
  cmd.add_flag("--enable-log-requests", o.enable_log_requests, "A line per request (the default)")->excludes(disable);
  cmd.add_flag("--disable-log-stats", o.disable_log_stats, "No periodic stats line");
  cmd.add_option("--log-stats-interval", o.log_stats_interval_s, "Seconds between stats lines while requests run")
      ->check(CLI::Range(0.1, 3600.0))->capture_default_str();
}

}  // namespace peregrine::cli
