#include "cli/score_command.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cli/engine_factory.h"
#include "model/deepseek_v4/model.h"
#include "model/host_model.h"
#include "sampling/sampler.h"
#ifdef PEREGRINE_WITH_CUDA
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/device_executor.h"
#endif

namespace peregrine::cli {

namespace {

struct ScoreFlags {
  EngineOptions engine;
  std::string tokens;      // int32 little-endian, rows of seq_len tokens
  int64_t seq_len = 512;
  std::string out;         // per predicted token: int32 argmax, float32 target logprob
  std::string logits_out;  // optional: float32 [rows * (seq_len - 1), vocab]
  std::string mtp_out;     // optional (CPU): per MTP prediction (token t + 2) int32 argmax, float32 logprob
};

// A row from position 0 in slot 0, every position's logits wanted.
ChunkView WholeRow(std::span<const int32_t> row, std::span<const int32_t> blocks) {
  ChunkView v;
  v.num_tokens = static_cast<int64_t>(row.size());
  v.tokens = row;
  v.blocks = blocks;
  v.all_logits = true;
  return v;
}

// One row's logits [T, vocab] (every position), on the chosen backend.
class RowScorer {
 public:
  virtual ~RowScorer() = default;
  virtual Status Forward(std::span<const int32_t> row, std::vector<float>* logits) = 0;
  // The checkpoint's first MTP layer over the row: [T - 1, vocab], row t predicting t + 2.
  virtual Status MtpForward(std::span<const int32_t> /*row*/, std::vector<float>* /*logits*/) {
    return Unimplemented("MTP scoring runs on the CPU backend");
  }
};

class CpuScorer final : public RowScorer {
 public:
  static Result<std::unique_ptr<RowScorer>> Create(ModelSource source, int64_t seq_len, const EngineOptions& e) {
    HostModelRegistry registry;
    deepseek_v4::RegisterHostModel(registry);
    PG_ASSIGN_OR_RETURN(HostModelFactory factory, registry.Find(source.config.model_type));
    auto s = std::make_unique<CpuScorer>();
    HostModelOptions mo;
    mo.num_threads = e.threads;
    mo.kv_cache_fp8 = e.kv_cache_dtype == "fp8";
    PG_ASSIGN_OR_RETURN(s->model_, factory(source.config, std::move(source.checkpoint), mo));
    const KvLayout layout = s->model_->kv_layout(256);
    const auto blocks = static_cast<int32_t>(std::max<int64_t>(layout.BlocksFor(seq_len), 1));
    s->kv_ = s->model_->CreateKvPools(layout.block_tokens, 1, blocks, 0);
    for (int32_t b = 0; b < blocks; ++b) s->blocks_.push_back(b);
    return std::unique_ptr<RowScorer>(std::move(s));
  }
  Status Forward(std::span<const int32_t> row, std::vector<float>* logits) override {
    const ChunkView views[] = {WholeRow(row, blocks_)};
    return model_->Forward(views, *kv_, logits);
  }
  Status MtpForward(std::span<const int32_t> row, std::vector<float>* logits) override {
    auto* v4 = dynamic_cast<deepseek_v4::Model*>(model_.get());
    if (v4 == nullptr) return Unimplemented("MTP scoring needs the DeepSeek-V4 CPU model");
    return v4->MtpLogits(row, logits);
  }

 private:
  std::unique_ptr<HostModel> model_;
  std::unique_ptr<HostKvPools> kv_;
  std::vector<int32_t> blocks_;
};

#ifdef PEREGRINE_WITH_CUDA
class CudaScorer final : public RowScorer {
 public:
  static Result<std::unique_ptr<RowScorer>> Create(ModelSource source, const EngineOptions& e, int64_t seq_len) {
    DeviceModelRegistry registry;
    deepseek_v4::cuda::RegisterDeviceModel(registry);
    PG_ASSIGN_OR_RETURN(DeviceModelFactory factory, registry.Find(source.config.model_type));
    ExecutorOptions o;
    o.device = e.cuda_device;
    o.num_slots = 1;
    o.max_tokens = seq_len;
    o.max_logit_rows = seq_len;
    o.max_context = seq_len + 1;
    o.block_tokens = e.block_size;
    o.prefix_caching = false;
    o.weights.expert_format = e.expert_format;
    o.weights.dense_format = e.dense_format;
    o.batch_invariant = e.deterministic_inference;
    o.kv_cache_fp8 = e.kv_cache_dtype == "fp8";
    {
      const KvLayout layout = deepseek_v4::KvGeometry::For(source.config, o.block_tokens, {2, 2}).Layout();
      o.kv_tokens = std::max<int64_t>(layout.BlocksFor(o.max_context), 1) * layout.block_tokens;
    }
    auto s = std::make_unique<CudaScorer>();
    PG_ASSIGN_OR_RETURN(s->executor_, DeviceExecutor::Create(source.config, *source.checkpoint, factory, o));
    const int64_t blocks = s->executor_->kv_capacity().layout.BlocksFor(o.max_context);
    for (int64_t b = 0; b < blocks; ++b) s->blocks_.push_back(static_cast<int32_t>(b));
    return std::unique_ptr<RowScorer>(std::move(s));
  }
  Status Forward(std::span<const int32_t> row, std::vector<float>* logits) override {
    const ChunkView views[] = {WholeRow(row, blocks_)};
    return executor_->Forward(views, logits);
  }

 private:
  std::unique_ptr<DeviceExecutor> executor_;
  std::vector<int32_t> blocks_;
};
#endif

int Fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  return 1;
}

int Run(const ScoreFlags& f) {
  std::ifstream in(f.tokens, std::ios::binary);
  if (!in) return Fail(InvalidArgument("cannot read " + f.tokens));
  std::vector<int32_t> tokens((std::filesystem::file_size(f.tokens) + 3) / 4);
  in.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(tokens.size() * 4));
  if (f.seq_len < 2 || tokens.empty() || tokens.size() % static_cast<size_t>(f.seq_len) != 0)
    return Fail(InvalidArgument("the token file must hold whole rows of --seq-len (>= 2) int32 tokens"));
  auto source = OpenModel(f.engine);
  if (!source.ok()) return Fail(source.status());
  const int64_t vocab = source->config.vocab_size;
  for (int32_t t : tokens)
    if (t < 0 || t >= vocab) return Fail(InvalidArgument("a token id outside the vocabulary"));
  Result<std::unique_ptr<RowScorer>> scorer = InvalidArgument("unknown device '" + f.engine.device + "'");
  if (f.engine.device == "cpu") {
    scorer = CpuScorer::Create(std::move(source).value(), f.seq_len, f.engine);
  } else if (f.engine.device == "cuda") {
#ifdef PEREGRINE_WITH_CUDA
    scorer = CudaScorer::Create(std::move(source).value(), f.engine, f.seq_len);
#else
    scorer = Unimplemented("this build has no CUDA backend");
#endif
  }
  if (!scorer.ok()) return Fail(scorer.status());

  std::ofstream out(f.out, std::ios::binary);
  std::ofstream logits_out, mtp_out;
  if (!f.logits_out.empty()) logits_out.open(f.logits_out, std::ios::binary);
  if (!f.mtp_out.empty()) mtp_out.open(f.mtp_out, std::ios::binary);
  if (!f.mtp_out.empty() && !mtp_out) return Fail(InvalidArgument("cannot write " + f.mtp_out));
  if (!out || (!f.logits_out.empty() && !logits_out)) return Fail(InvalidArgument("cannot write the outputs"));
  const auto rows = static_cast<int64_t>(tokens.size()) / f.seq_len;
  const auto v = static_cast<size_t>(vocab);
  double nll = 0.0, mtp_nll = 0.0;
  int64_t n = 0, mtp_n = 0, mtp_top1 = 0;
  const auto start = std::chrono::steady_clock::now();
  std::vector<float> logits;
  for (int64_t r = 0; r < rows; ++r) {
    const std::span<const int32_t> row(tokens.data() + r * f.seq_len, static_cast<size_t>(f.seq_len));
    if (Status s = (*scorer)->Forward(row, &logits); !s.ok()) return Fail(s);
    if (logits.size() != row.size() * v) return Fail(Internal("unexpected logits rows"));
    for (size_t i = 0; i + 1 < row.size(); ++i) {
      const std::span<const float> x(logits.data() + i * v, v);
      const SampleResult s = ScoreToken(x, row[i + 1], 1);
      const int32_t argmax = s.top_logprobs.empty() ? -1 : s.top_logprobs.front().token;
      out.write(reinterpret_cast<const char*>(&argmax), 4);
      out.write(reinterpret_cast<const char*>(&s.logprob), 4);
      nll -= s.logprob;
      ++n;
    }
    if (logits_out)
      logits_out.write(reinterpret_cast<const char*>(logits.data()),
                       static_cast<std::streamsize>((row.size() - 1) * v * 4));
    if (!mtp_out.is_open()) continue;
    if (Status s = (*scorer)->MtpForward(row, &logits); !s.ok()) return Fail(s);
    for (size_t t = 0; t + 2 < row.size(); ++t) {
      const SampleResult s = ScoreToken(std::span<const float>(logits.data() + t * v, v), row[t + 2], 1);
      const int32_t argmax = s.top_logprobs.front().token;
      mtp_out.write(reinterpret_cast<const char*>(&argmax), 4);
      mtp_out.write(reinterpret_cast<const char*>(&s.logprob), 4);
      mtp_nll -= s.logprob;
      mtp_top1 += argmax == row[t + 2];
      ++mtp_n;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string mtp;
  if (mtp_n > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, ", \"mtp_tokens\": %lld, \"mtp_nll\": %.6f, \"mtp_top1\": %.6f",
                  static_cast<long long>(mtp_n), mtp_nll / static_cast<double>(mtp_n),
                  static_cast<double>(mtp_top1) / static_cast<double>(mtp_n));
    mtp = buf;
  }
  std::printf("{\"device\": \"%s\", \"rows\": %lld, \"tokens\": %lld, \"nll\": %.6f, \"ppl\": %.4f%s, \"seconds\": %.2f}\n",
              f.engine.device.c_str(), static_cast<long long>(rows), static_cast<long long>(n), nll / static_cast<double>(n),
              std::exp(nll / static_cast<double>(n)), mtp.c_str(), seconds);
  return out && (!logits_out.is_open() || logits_out) && (!mtp_out.is_open() || mtp_out)
             ? 0
             : Fail(Internal("writing the outputs failed"));
}

}  // namespace

void AddScoreCommand(CLI::App& app) {
  auto f = std::make_shared<ScoreFlags>();
  CLI::App* cmd = app.add_subcommand("score", "Teacher-forced scoring of token rows (logprobs, argmax, logits)");
  cmd->add_option("--model-path", f->engine.model_path, "Model directory (config.json; default: the demo model)");
  cmd->add_option("--device", f->engine.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--threads", f->engine.threads, "CPU threads")->capture_default_str();
  cmd->add_option("--expert-format", f->engine.expert_format, "CUDA routed experts: bf16 or mxfp4")
      ->check(CLI::IsMember({"bf16", "mxfp4"}));
  cmd->add_option("--kv-cache-dtype", f->engine.kv_cache_dtype,
                  "auto, or fp8: KV rows as V4's FP8 cache format stores them")
      ->check(CLI::IsMember({"auto", "fp8"}))
      ->capture_default_str();
  cmd->add_option("--dense-format", f->engine.dense_format, "CUDA dense projections: bf16 or fp8")
      ->check(CLI::IsMember({"bf16", "fp8"}));
  cmd->add_flag("--enable-deterministic-inference", f->engine.deterministic_inference,
                "CUDA: batch-invariant kernels (a row's logits do not depend on how its tokens are chunked)");
  cmd->add_option("--tokens", f->tokens, "int32 little-endian token rows")->required();
  cmd->add_option("--seq-len", f->seq_len, "Tokens per row")->capture_default_str();
  cmd->add_option("--out", f->out, "Per predicted token: int32 argmax, float32 logprob of the next token")->required();
  cmd->add_option("--logits-out", f->logits_out, "Every predicting row's float32 logits");
  cmd->add_option("--mtp-out", f->mtp_out,
                  "CPU: the checkpoint's MTP layer per row position (token t + 2): int32 argmax, float32 logprob");
  cmd->callback([f] {
    if (const int rc = Run(*f); rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
