// Prefill/decode disaggregation in the engine on the CPU backend with the trained demo
// model: a prefill engine computes each prompt and exports its KV with the first token, a
// decode engine loads it and continues; every request's tokens and logprobs equal those of
// one engine doing both, bit for bit (greedy and seeded sampling, penalties, min_tokens,
// stop tokens, logprobs), with prefix hits on the prefill side, preemption on the decode
// side, and through the real transfer (UCX on loopback) between them.
#include <gtest/gtest.h>

#include <future>
#include <map>
#include <string>
#include <vector>

#include "demo_model_golden.h"
#include "speculative_requests.h"
#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"
#include "engine/engine.h"
#include "model/deepseek_v4/model.h"
#include "runtime/cpu_model_runner.h"

namespace peregrine {
namespace {

using Collected = testing::CollectedRequest;
using testing::CollectInto;

struct RunSetup {
  int64_t kv_tokens = 1 << 14;
  int64_t block_tokens = 128;
  int64_t max_num_seqs = 8;
  int64_t budget = 256;
  speculative::SpeculativeConfig spec;
};

std::unique_ptr<Engine> MakeEngine(const RunSetup& s) {
  auto model = deepseek_v4::Model::Load(testing::DemoModelDir(), 2);
  EXPECT_TRUE(model.ok()) << model.status().ToString();
  if (!model.ok()) return nullptr;
  CpuRunnerOptions o;
  o.num_slots = static_cast<int32_t>(s.max_num_seqs);
  o.kv_tokens = s.kv_tokens;
  o.block_tokens = s.block_tokens;
  o.snapshot_fraction = 0.5;
  o.speculative = s.spec;
  auto runner = CpuModelRunner::Create(std::move(model).value(), o);
  EXPECT_TRUE(runner.ok()) << runner.status().ToString();
  if (!runner.ok()) return nullptr;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = s.budget;
  ec.scheduler.max_num_seqs = s.max_num_seqs;
  return std::make_unique<Engine>(ec, std::move(runner).value());
}

std::vector<EngineRequest> Requests() {
  auto golden = testing::ReadDemoGolden();
  EXPECT_TRUE(golden.ok()) << golden.status().ToString();
  if (!golden.ok()) return {};
  std::vector<EngineRequest> out;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r;
    r.id = "d";
    r.id += std::to_string(i);
    const std::vector<int32_t>& text = i % 2 == 0 ? golden->mtp_tokens : golden->prompt_ids;
    // Lengths across the 128-token block boundary; two share a long prefix (a prefix hit).
    const size_t len = std::min<size_t>(text.size(), i == 7 ? 150 : 20 + 23 * static_cast<size_t>(i));
    r.prompt_ids.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(len));
    r.max_tokens = 30 + 7 * (i % 3);
    testing::SetDemoSampling(i, text, len, &r);
    out.push_back(std::move(r));
  }
  return out;
}

void Drain(Engine& e) {
  for (int step = 0; step < 100000 && e.Step(); ++step) {
  }
}

std::vector<Collected> RunColocated(const std::vector<EngineRequest>& requests) {
  std::vector<Collected> out(requests.size());
  auto engine = MakeEngine(RunSetup{});
  if (!engine) return out;
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_TRUE(engine->Submit(requests[i], CollectInto(&out[i])).ok());
  Drain(*engine);
  return out;
}

// Prefill side: each request generates its first token and exports its KV.
std::vector<std::shared_ptr<const TransferredKv>> RunPrefill(const std::vector<EngineRequest>& requests) {
  std::vector<std::shared_ptr<const TransferredKv>> kvs(requests.size());
  auto engine = MakeEngine(RunSetup{});
  if (!engine) return kvs;
  std::vector<Collected> first(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EngineRequest r = requests[i];
    r.max_tokens = 1;
    r.export_kv = [&kvs, i](Result<TransferredKv> kv) {
      ASSERT_TRUE(kv.ok()) << kv.status().ToString();
      kvs[i] = std::make_shared<const TransferredKv>(std::move(kv).value());
    };
    EXPECT_TRUE(engine->Submit(std::move(r), CollectInto(&first[i])).ok());
  }
  Drain(*engine);
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(first[i].tokens.size(), 1u);
    if (kvs[i] != nullptr && !first[i].tokens.empty()) {
      EXPECT_EQ(kvs[i]->first.token, first[i].tokens[0]);
    }
  }
  return kvs;
}

std::vector<Collected> RunDecode(const std::vector<EngineRequest>& requests,
                                 const std::vector<std::shared_ptr<const TransferredKv>>& kvs, const RunSetup& setup,
                                 EngineStats* stats = nullptr) {
  std::vector<Collected> out(requests.size());
  auto engine = MakeEngine(setup);
  if (!engine) return out;
  for (size_t i = 0; i < requests.size(); ++i) {
    EngineRequest r = requests[i];
    r.import_kv = kvs[i];
    const Status s = engine->Submit(std::move(r), CollectInto(&out[i]));
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  Drain(*engine);
  if (stats != nullptr) *stats = engine->Stats();
  return out;
}

void ExpectIdentical(const std::vector<Collected>& got, const std::vector<Collected>& want, const std::string& what) {
  testing::ExpectIdenticalRequests(got, want, what);
}

TEST(DisaggregatedEngine, DecodeFromTransferredKvGivesTheColocatedTokens) {
  const std::vector<EngineRequest> requests = Requests();
  const auto want = RunColocated(requests);
  const auto kvs = RunPrefill(requests);
  for (const auto& kv : kvs) ASSERT_NE(kv, nullptr);
  ExpectIdentical(RunDecode(requests, kvs, RunSetup{}), want, "decode");
  // A decode engine short of KV preempts: those requests recompute on their own.
  RunSetup tight;
  tight.kv_tokens = 640;
  tight.max_num_seqs = 3;
  ExpectIdentical(RunDecode(requests, kvs, tight), want, "decode under preemption");
  // A speculating decode engine (MTP chains, DDTree trees) drafts from the first decoded
  // position on and verifies against the same tokens.
  RunSetup mtp;
  mtp.spec.algorithm = speculative::Algorithm::kMtp;
  mtp.spec.num_steps = 3;
  EngineStats stats;
  ExpectIdentical(RunDecode(requests, kvs, mtp, &stats), want, "speculating decode (mtp)");
  EXPECT_GT(stats.spec_num_drafts, 0);
  EXPECT_GT(stats.spec_num_accepted_tokens, 0);
  RunSetup tree;
  tree.spec.algorithm = speculative::Algorithm::kDdtree;
  tree.spec.num_steps = 3;
  tree.spec.num_draft_tokens = 8;
  tree.spec.topk = 3;
  ExpectIdentical(RunDecode(requests, kvs, tree, &stats), want, "speculating decode (ddtree)");
  EXPECT_GT(stats.spec_num_accepted_tokens, 0);
}

TEST(DisaggregatedEngine, TheRealTransferCarriesTheKv) {
  const std::vector<EngineRequest> requests = Requests();
  const auto want = RunColocated(requests);
  disaggregation::KvSenderConfig sc;
  sc.port = 0;
  sc.secret = "deployment-secret";
  auto sender = disaggregation::KvSender::Start(sc);
  ASSERT_TRUE(sender.ok()) << sender.status().ToString();
  disaggregation::KvReceiverConfig rc;
  rc.secret = sc.secret;
  auto receiver = disaggregation::KvReceiver::Start(rc);
  ASSERT_TRUE(receiver.ok()) << receiver.status().ToString();
  const auto exported = RunPrefill(requests);
  std::vector<std::shared_ptr<const TransferredKv>> pulled(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_NE(exported[i], nullptr);
    (*sender)->Publish(1000 + i, TransferredKv(*exported[i]));
    std::promise<Result<TransferredKv>> p;
    (*receiver)->Pull("127.0.0.1", (*sender)->port(), 1000 + i, [&p](Result<TransferredKv> kv) { p.set_value(std::move(kv)); });
    Result<TransferredKv> kv = p.get_future().get();
    ASSERT_TRUE(kv.ok()) << kv.status().ToString();
    pulled[i] = std::make_shared<const TransferredKv>(std::move(kv).value());
  }
  ExpectIdentical(RunDecode(requests, pulled, RunSetup{}), want, "decode over the transfer");
}

TEST(DisaggregatedEngine, MismatchedTransfersAreRefusedAtSubmission) {
  const std::vector<EngineRequest> requests = Requests();
  const auto kvs = RunPrefill({requests[0]});
  ASSERT_NE(kvs[0], nullptr);
  auto engine = MakeEngine(RunSetup{});
  ASSERT_NE(engine, nullptr);
  Collected c;
  EngineRequest r = requests[0];
  auto other = std::make_shared<TransferredKv>(*kvs[0]);
  other->fingerprint += "x";
  r.import_kv = other;
  EXPECT_EQ(engine->Submit(r, CollectInto(&c)).code(), StatusCode::kInvalidArgument);
  other = std::make_shared<TransferredKv>(*kvs[0]);
  other->prompt_ids.back() ^= 1;
  r.import_kv = other;
  EXPECT_EQ(engine->Submit(r, CollectInto(&c)).code(), StatusCode::kInvalidArgument);
  other = std::make_shared<TransferredKv>(*kvs[0]);
  other->pages.pop_back();
  r.import_kv = other;
  EXPECT_EQ(engine->Submit(r, CollectInto(&c)).code(), StatusCode::kInvalidArgument);
  // A page of the wrong size passes submission and fails the load: the request recomputes.
  other = std::make_shared<TransferredKv>(*kvs[0]);
  other->pages.back().pop_back();
  r.import_kv = other;
  ASSERT_TRUE(engine->Submit(r, CollectInto(&c)).ok());
  Drain(*engine);
  const auto want = RunColocated({requests[0]});
  EXPECT_EQ(c.tokens, want[0].tokens);
  // An export needs exactly one generated token.
  EngineRequest e = requests[0];
  e.id = "e";
  e.export_kv = [](Result<TransferredKv>) {};
  EXPECT_EQ(engine->Submit(e, CollectInto(&c)).code(), StatusCode::kInvalidArgument);
}

TEST(DisaggregatedEngine, KvThatDoesNotLoadIsRecomputedOrFailsAsThePolicySays) {
  // Device pages (CUDA IPC) reach a CPU engine: its runner cannot load them. Counted either
  // way; the request computes its prompt (the colocated tokens) or, import_required, fails.
  const std::vector<EngineRequest> requests = Requests();
  const auto kvs = RunPrefill({requests[1]});
  ASSERT_NE(kvs[0], nullptr);
  auto device = std::make_shared<TransferredKv>(*kvs[0]);
  auto pages = std::make_shared<DeviceKvPages>();
  for (const std::vector<uint8_t>& p : device->pages) pages->sizes.push_back(p.size());
  pages->offsets.assign(pages->sizes.size(), 0);
  pages->checksums.assign(pages->sizes.size(), 0);
  device->pages.clear();
  device->device = pages;
  auto engine = MakeEngine(RunSetup{});
  ASSERT_NE(engine, nullptr);
  Collected recomputed, failed;
  EngineRequest r = requests[1];
  r.import_kv = device;
  ASSERT_TRUE(engine->Submit(r, CollectInto(&recomputed)).ok());
  r.id += "-required";
  r.import_required = true;
  ASSERT_TRUE(engine->Submit(r, CollectInto(&failed)).ok());
  Drain(*engine);
  const auto want = RunColocated({requests[1]});
  EXPECT_EQ(recomputed.tokens, want[0].tokens);
  EXPECT_EQ(recomputed.logprobs, want[0].logprobs);
  EXPECT_EQ(failed.finish, FinishReason::kError);
  EXPECT_TRUE(failed.tokens.empty());
  EXPECT_EQ(engine->Stats().kv_imports_failed, 2);
  EXPECT_EQ(engine->Stats().kv_imports_recomputed, 1);
}

TEST(DisaggregatedEngine, AnAbortedPrefillExportsItsReason) {
  auto engine = MakeEngine(RunSetup{});
  ASSERT_NE(engine, nullptr);
  EngineRequest r = Requests()[4];
  r.max_tokens = 1;
  std::optional<Status> exported;
  r.export_kv = [&exported](Result<TransferredKv> kv) { exported = kv.status(); };
  Collected c;
  ASSERT_TRUE(engine->Submit(r, CollectInto(&c)).ok());
  engine->Abort(r.id);
  Drain(*engine);
  ASSERT_TRUE(exported.has_value());
  EXPECT_FALSE(exported->ok());
  EXPECT_EQ(c.finish, FinishReason::kAbort);
}

}  // namespace
}  // namespace peregrine
