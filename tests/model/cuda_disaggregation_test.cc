// Prefill/decode disaggregation on the CUDA runner: pages exported from the device pools
// and imported into another runner's come back byte for byte, and a request run alone on a
// prefill engine and then a decode engine (its KV carried as pages) gives exactly the tokens
// and logprobs of the same request run alone on one engine, with decode graphs and
// overlapped steps. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "backend/cuda/device.h"
#include "engine/engine.h"
#include "golden.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/cuda/cuda_model.h"
#include "runtime/cuda_kv_staging.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/device_executor.h"
#include "runtime/kv_page_checksum.h"

namespace peregrine {
namespace {

constexpr int64_t kSeqs = 4;

// `kv_fp8`: --kv-cache-dtype fp8 (FP8 entries in the pages).
std::unique_ptr<CudaModelRunner> MakeRunner(const std::filesystem::path& fixture, bool kv_fp8 = false) {
  const auto dir = fixture / "model";
  auto config = LoadModelConfig(dir);
  auto checkpoint = Checkpoint::Open(dir);
  EXPECT_TRUE(config.ok() && checkpoint.ok());
  if (!config.ok() || !checkpoint.ok()) return nullptr;
  DeviceModelRegistry registry;
  deepseek_v4::cuda::RegisterDeviceModel(registry);
  auto factory = registry.Find(config->model_type);
  if (!factory.ok()) return nullptr;
  ExecutorOptions o;
  o.num_slots = kSeqs;
  o.max_tokens = 64;
  o.max_context = std::min<int64_t>(config->max_position_embeddings, 256);
  o.block_tokens = 64;
  o.kv_tokens = 8 * 256;
  o.prefix_caching = false;
  o.max_logit_rows = kSeqs;
  o.kv_cache_fp8 = kv_fp8;
  auto executor = DeviceExecutor::Create(*config, **checkpoint, *factory, o);
  EXPECT_TRUE(executor.ok()) << executor.status().ToString();
  if (!executor.ok()) return nullptr;
  EXPECT_TRUE((*executor)->EnableGraphs(kSeqs).ok());
  return std::make_unique<CudaModelRunner>(std::move(executor).value(), true, true);
}

std::unique_ptr<Engine> MakeEngine(const std::filesystem::path& fixture,
                                   std::shared_ptr<KvStagingArena> staging = nullptr, bool kv_fp8 = false) {
  auto runner = MakeRunner(fixture, kv_fp8);
  if (runner == nullptr) return nullptr;
  if (staging != nullptr) runner->SetKvStaging(std::move(staging));
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 64;
  ec.scheduler.max_num_seqs = kSeqs;
  return std::make_unique<Engine>(ec, std::move(runner));
}

struct Collected {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::optional<FinishReason> finish;
};

EventSink Into(Collected* c) {
  return [c](const EngineEvent& ev) {
    c->tokens.insert(c->tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
    for (const SampleResult& s : ev.samples) c->logprobs.push_back(s.logprob);
    if (ev.finish) c->finish = ev.finish;
  };
}

void Drain(Engine& e) {
  for (int i = 0; i < 100000 && e.Step(); ++i) {
  }
}

// The request's first token on a prefill engine, and the KV it exports (null on failure).
std::shared_ptr<const TransferredKv> Prefill(Engine& prefill, const EngineRequest& r) {
  EngineRequest p = r;
  p.max_tokens = 1;
  std::shared_ptr<const TransferredKv> kv;
  p.export_kv = [&kv](Result<TransferredKv> k) {
    EXPECT_TRUE(k.ok()) << k.status().ToString();
    if (k.ok()) kv = std::make_shared<const TransferredKv>(std::move(k).value());
  };
  Collected first;
  EXPECT_TRUE(prefill.Submit(p, Into(&first)).ok());
  Drain(prefill);
  EXPECT_EQ(first.tokens.size(), 1u);
  return kv;
}

class CudaDisaggregationTest : public ::testing::TestWithParam<std::filesystem::path> {
 protected:
  void SetUp() override {
    if (peregrine::cuda::ListDevices().empty()) GTEST_SKIP() << "no CUDA device";
  }
};

// Requests prefilled on one engine and decoded on another from the transferred pages give the
// tokens and logprobs of one engine doing both.
void ExpectTransferredDecodeMatchesOneEngine(const std::filesystem::path& fixture, bool kv_fp8) {
  auto colocated = MakeEngine(fixture, nullptr, kv_fp8);
  auto prefill = MakeEngine(fixture, nullptr, kv_fp8);
  auto decode = MakeEngine(fixture, nullptr, kv_fp8);
  ASSERT_TRUE(colocated && prefill && decode);
  ASSERT_FALSE(decode->kv_fingerprint().empty());
  ASSERT_EQ(prefill->kv_fingerprint(), decode->kv_fingerprint());
  const int64_t vocab = colocated->vocab_size();
  for (int i = 0; i < 4; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);  // (not "r" + ...: GCC 12 -Wrestrict false positive at -O3)
    // Prompts across the 64-token blocks, greedy and seeded.
    for (int t = 0; t < 9 + 41 * i; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 37 + i * 11 + 5) % vocab));
    r.max_tokens = 14;
    r.ignore_eos = true;
    r.sampling.logprobs = 2;
    r.sampling.temperature = i % 2 == 0 ? 0.0f : 0.9f;
    r.sampling.seed = 40 + static_cast<uint64_t>(i);
    Collected want, got;
    ASSERT_TRUE(colocated->Submit(r, Into(&want)).ok());
    Drain(*colocated);
    const std::shared_ptr<const TransferredKv> kv = Prefill(*prefill, r);
    ASSERT_NE(kv, nullptr);
    EngineRequest d = r;
    d.import_kv = kv;
    const Status s = decode->Submit(d, Into(&got));
    ASSERT_TRUE(s.ok()) << s.ToString();
    Drain(*decode);
    EXPECT_EQ(got.finish, want.finish) << "request " << i;
    EXPECT_EQ(got.tokens, want.tokens) << "request " << i;
    EXPECT_EQ(got.logprobs, want.logprobs) << "request " << i;
  }
}

TEST_P(CudaDisaggregationTest, RequestsDecodedFromTransferredPagesMatchOneEngine) {
  ExpectTransferredDecodeMatchesOneEngine(GetParam(), /*kv_fp8=*/false);
}

// --kv-cache-dtype fp8: the pages carry FP8 entries, so the transfer works between FP8 engines
// and the fingerprint keeps a bf16 engine from reading them.
TEST_P(CudaDisaggregationTest, Fp8KvPagesTransferAndNameTheirFormat) {
  ExpectTransferredDecodeMatchesOneEngine(GetParam(), /*kv_fp8=*/true);
  auto fp8 = MakeEngine(GetParam(), nullptr, true);
  auto bf16 = MakeEngine(GetParam());
  ASSERT_TRUE(fp8 && bf16);
  EXPECT_NE(fp8->kv_fingerprint(), bf16->kv_fingerprint());
}

TEST_P(CudaDisaggregationTest, PagesRoundTripThroughTheDevicePools) {
  auto runner = MakeRunner(GetParam());
  ASSERT_NE(runner, nullptr);
  const KvLayout layout = runner->kv_capacity().layout;
  const int64_t n = 2 * layout.block_tokens + 5;
  const std::vector<int32_t> blocks = {3, 0, 5};
  ASSERT_EQ(static_cast<int64_t>(blocks.size()), layout.BlocksFor(n));
  TransferredKv none;
  EXPECT_FALSE(runner->ImportKv(1, blocks, n, none).ok());  // the wrong page count
  EXPECT_FALSE(runner->ExportKv(2, blocks, n, &none).ok());  // the slot holds nothing yet
  // Pages of the layout's sizes, filled with a pattern, go in and come out unchanged.
  std::vector<std::vector<uint8_t>> pages(blocks.size() + 1);
  int64_t slot_bytes = 0, block_bytes = 0;
  for (const KvKind& k : layout.per_request) slot_bytes += k.bytes;
  for (const KvKind& k : layout.paged) block_bytes += k.bytes;
  pages[0].resize(static_cast<size_t>(slot_bytes));
  for (size_t i = 1; i < pages.size(); ++i) pages[i].resize(static_cast<size_t>(block_bytes));
  uint32_t x = 12345;
  for (auto& p : pages)
    for (uint8_t& b : p) b = static_cast<uint8_t>((x = x * 1103515245u + 12345u) >> 24);
  TransferredKv kv;
  kv.pages = pages;
  const Status in = runner->ImportKv(2, blocks, n, kv);
  ASSERT_TRUE(in.ok()) << in.ToString();
  TransferredKv out;
  const Status ex = runner->ExportKv(2, blocks, n, &out);
  ASSERT_TRUE(ex.ok()) << ex.ToString();
  ASSERT_EQ(out.pages.size(), pages.size());
  EXPECT_EQ(out.device, nullptr);
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_TRUE(out.pages[i] == pages[i]) << "page " << i;

  // With a staging arena the same pages go to device memory, each with its checksum, and
  // their slab is free again once the last reference goes.
  auto arena = KvStagingArena::Create(8u << 20);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  runner->SetKvStaging(*arena);
  TransferredKv staged;
  const Status st = runner->ExportKv(2, blocks, n, &staged);
  ASSERT_TRUE(st.ok()) << st.ToString();
  ASSERT_NE(staged.device, nullptr);
  EXPECT_TRUE(staged.pages.empty());
  EXPECT_EQ(staged.device->ipc_handle, (*arena)->ipc_handle());
  EXPECT_EQ(staged.device->host, CudaIpcHostId());
  ASSERT_EQ(staged.num_pages(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) {
    std::vector<uint8_t> back(pages[i].size());
    ASSERT_EQ(cudaMemcpy(back.data(), (*arena)->base() + staged.device->offsets[i], back.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(back == pages[i]) << "page " << i;
    EXPECT_EQ(staged.device->checksums[i], KvPageChecksum(pages[i])) << "page " << i;
  }
  EXPECT_GT((*arena)->used(), 0u);
  staged = TransferredKv{};
  EXPECT_EQ((*arena)->used(), 0u);
  // An arena too small for the request: its pages go through host memory instead.
  auto tiny = KvStagingArena::Create(4096);
  ASSERT_TRUE(tiny.ok());
  runner->SetKvStaging(*tiny);
  TransferredKv fallback;
  ASSERT_TRUE(runner->ExportKv(2, blocks, n, &fallback).ok());
  EXPECT_EQ(fallback.device, nullptr);
  EXPECT_EQ(fallback.pages, pages);
  // Device pages of another host are refused, and nothing usable is left in the slot.
  auto elsewhere = std::make_shared<DeviceKvPages>();
  elsewhere->host = "another-host";
  elsewhere->ipc_handle.assign(64, 0);
  elsewhere->sizes.assign(pages.size(), 0);
  for (size_t i = 0; i < pages.size(); ++i) elsewhere->sizes[i] = pages[i].size();
  elsewhere->offsets.assign(pages.size(), 0);
  elsewhere->checksums.assign(pages.size(), 0);
  TransferredKv remote;
  remote.device = elsewhere;
  EXPECT_EQ(runner->ImportKv(2, blocks, n, remote).code(), StatusCode::kUnavailable);
  EXPECT_FALSE(runner->ExportKv(2, blocks, n, &out).ok());
}

// Two processes on one GPU (CUDA IPC does not open a handle in the process that made it):
// this one prefills into its staging arena; a child (this binary again, running only
// CudaIpcChild.Decode) decodes from those device pages. The request gives the tokens and
// logprobs of one engine; a page failing its checksum is recomputed, or fails the request
// when its server says so.
constexpr char kChildDir[] = "PEREGRINE_IPC_CHILD_DIR";

EngineRequest IpcRequest(int64_t vocab) {
  EngineRequest r;
  r.id = "ipc";
  for (int t = 0; t < 150; ++t) r.prompt_ids.push_back(static_cast<int32_t>((t * 53 + 7) % vocab));
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.logprobs = 1;
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 77;
  return r;
}

void WriteRoom(const std::filesystem::path& file, const TransferredKv& kv) {
  std::ofstream out(file);
  const DeviceKvPages& d = *kv.device;
  out << kv.fingerprint << '\n' << d.host << '\n' << d.arena_bytes << ' ' << d.sizes.size() << '\n';
  for (uint8_t b : d.ipc_handle) out << static_cast<int>(b) << ' ';
  out << '\n';
  for (size_t i = 0; i < d.sizes.size(); ++i) out << d.offsets[i] << ' ' << d.sizes[i] << ' ' << d.checksums[i] << '\n';
  char lp[64];
  std::snprintf(lp, sizeof lp, "%a", static_cast<double>(kv.first.logprob));
  out << kv.num_tokens << ' ' << kv.first.token << ' ' << lp << ' ' << kv.first.top_logprobs.size() << '\n';
  for (const TokenLogprob& t : kv.first.top_logprobs) {
    std::snprintf(lp, sizeof lp, "%a", static_cast<double>(t.logprob));
    out << t.token << ' ' << lp << '\n';
  }
}

TransferredKv ReadRoom(const std::filesystem::path& file, const std::vector<int32_t>& prompt) {
  std::ifstream in(file);
  TransferredKv kv;
  auto d = std::make_shared<DeviceKvPages>();
  size_t n = 0;
  std::getline(in, kv.fingerprint);
  std::getline(in, d->host);
  in >> d->arena_bytes >> n;
  for (int i = 0; i < 64; ++i) {
    int b = 0;
    in >> b;
    d->ipc_handle.push_back(static_cast<uint8_t>(b));
  }
  d->offsets.resize(n);
  d->sizes.resize(n);
  d->checksums.resize(n);
  for (size_t i = 0; i < n; ++i) in >> d->offsets[i] >> d->sizes[i] >> d->checksums[i];
  std::string lp;
  size_t top = 0;
  in >> kv.num_tokens >> kv.first.token >> lp >> top;
  kv.first.logprob = std::strtof(lp.c_str(), nullptr);
  for (size_t i = 0; i < top; ++i) {
    TokenLogprob t;
    in >> t.token >> lp;
    t.logprob = std::strtof(lp.c_str(), nullptr);
    kv.first.top_logprobs.push_back(t);
  }
  kv.prompt_ids = prompt;
  kv.device = d;
  return kv;
}

void WriteCollected(std::ostream& out, const Collected& c) {
  out << (c.finish ? static_cast<int>(*c.finish) : -1) << ' ' << c.tokens.size();
  for (int32_t t : c.tokens) out << ' ' << t;
  char lp[64];
  for (float l : c.logprobs) {
    std::snprintf(lp, sizeof lp, "%a", static_cast<double>(l));
    out << ' ' << lp;
  }
  out << '\n';
}

Collected ReadCollected(std::istream& in) {
  Collected c;
  int finish = -1;
  size_t n = 0;
  in >> finish >> n;
  if (finish >= 0) c.finish = static_cast<FinishReason>(finish);
  c.tokens.resize(n);
  for (int32_t& t : c.tokens) in >> t;
  for (size_t i = 0; i < n; ++i) {
    std::string lp;
    in >> lp;
    c.logprobs.push_back(std::strtof(lp.c_str(), nullptr));
  }
  return c;
}

// The child: three imports of the room (as sent, with a broken checksum, and with a broken
// checksum under the fail policy), each one's events into `result`.
void DecodeInChild() {
  const std::filesystem::path dir = std::getenv(kChildDir);
  std::string fixture;
  std::getline(std::ifstream(dir / "fixture"), fixture);
  auto decode = MakeEngine(fixture);
  ASSERT_NE(decode, nullptr);
  const EngineRequest base = IpcRequest(decode->vocab_size());
  const TransferredKv room = ReadRoom(dir / "room", base.prompt_ids);
  std::ofstream result(dir / "result");
  for (int variant = 0; variant < 3; ++variant) {
    TransferredKv kv = room;
    if (variant > 0) {
      auto broken = std::make_shared<DeviceKvPages>(*room.device);
      broken->checksums.back() ^= 1;
      kv.device = broken;
    }
    EngineRequest d = base;
    d.id += std::to_string(variant);
    d.import_kv = std::make_shared<const TransferredKv>(std::move(kv));
    d.import_required = variant == 2;
    Collected got;
    const Status s = decode->Submit(d, Into(&got));
    ASSERT_TRUE(s.ok()) << s.ToString();
    Drain(*decode);
    WriteCollected(result, got);
  }
  result << decode->Stats().kv_imports_failed << ' ' << decode->Stats().kv_imports_recomputed << '\n';
}

// Registered only in the child, so no test of the normal run is skipped.
const bool kChildRegistered = [] {
  if (std::getenv(kChildDir) == nullptr) return false;
  ::testing::RegisterTest("CudaIpcChild", "Decode", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> ::testing::Test* {
                            struct Child : ::testing::Test {
                              void TestBody() override { DecodeInChild(); }
                            };
                            return new Child;
                          });
  return true;
}();

TEST_P(CudaDisaggregationTest, TwoProcessesShareTheDeviceKvOverCudaIpc) {
  ASSERT_FALSE(kChildRegistered);  // the child runs CudaIpcChild.Decode only
  auto arena = KvStagingArena::Create(64u << 20);
  ASSERT_TRUE(arena.ok()) << arena.status().ToString();
  auto colocated = MakeEngine(GetParam());
  auto prefill = MakeEngine(GetParam(), *arena);
  ASSERT_TRUE(colocated && prefill);
  const EngineRequest r = IpcRequest(colocated->vocab_size());
  Collected want;
  ASSERT_TRUE(colocated->Submit(r, Into(&want)).ok());
  Drain(*colocated);
  std::shared_ptr<const TransferredKv> kv = Prefill(*prefill, r);
  ASSERT_NE(kv, nullptr);
  ASSERT_NE(kv->device, nullptr) << "the pages went through host memory";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("peregrine-ipc-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "fixture") << GetParam().string() << '\n';
  WriteRoom(dir / "room", *kv);
  const std::string env = std::string(kChildDir) + "=" + dir.string();
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(const_cast<char*>(env.c_str()));
  envp.push_back(nullptr);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string(), filter = "--gtest_filter=CudaIpcChild.*";
  char* argv[] = {self.data(), filter.data(), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the decode process failed: " << status;
  std::ifstream result(dir / "result");
  const Collected got = ReadCollected(result), recomputed = ReadCollected(result), refused = ReadCollected(result);
  int64_t failed = -1, recomputes = -1;
  result >> failed >> recomputes;
  std::filesystem::remove_all(dir);
  EXPECT_EQ(got.finish, want.finish);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.logprobs, want.logprobs);
  EXPECT_EQ(recomputed.tokens, want.tokens);  // the broken page was refused; the prompt computed there
  EXPECT_EQ(recomputed.logprobs, want.logprobs);
  EXPECT_EQ(refused.finish, FinishReason::kError);
  EXPECT_TRUE(refused.tokens.empty());
  EXPECT_EQ(failed, 2);
  EXPECT_EQ(recomputes, 1);
  // The prefill side frees the pages once its last reference goes.
  EXPECT_GT((*arena)->used(), 0u);
  kv.reset();
  EXPECT_EQ((*arena)->used(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaDisaggregationTest, ::testing::ValuesIn(testing::Bf16FixtureDirs()),
                         [](const auto& info) { return info.param.filename().string(); });

}  // namespace
}  // namespace peregrine
