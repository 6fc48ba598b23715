// The engine over a model split across rank processes (runtime/host_ranks.h): rank 0 runs the
// engine on a RankedHostModel, rank 1 replays its calls. Over prefix-cache restores, block
// boundaries, speculative verify steps (tree commits, MTP and block-drafter drafts) and a
// small KV pool, every request gets the tokens of the whole model and its logprobs within
// fp32 rounding.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "demo_model_golden.h"
#include "distributed/communicator.h"
#include "engine/engine.h"
#include "model/deepseek_v4/model.h"
#include "rank_processes.h"
#include "runtime/cpu_model_runner.h"
#include "runtime/host_ranks.h"

namespace peregrine {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::string name;
  bool ep = false;
  speculative::SpeculativeConfig spec;
  int64_t kv_tokens = 1 << 14;
  bool block_drafter = false;  // the DSpark-layout fixture (tests/fixtures/dspark_tiny) instead of the demo model
};

fs::path ModelDir(const Case& c) {
  if (!c.block_drafter) return testing::DemoModelDir();
  return testing::DemoModelDir().parent_path().parent_path() / "tests" / "fixtures" / "dspark_tiny" / "model";
}

std::vector<EngineRequest> Requests(int64_t vocab) {
  auto golden = testing::ReadDemoGolden();
  EXPECT_TRUE(golden.ok());
  std::vector<EngineRequest> out;
  if (!golden.ok()) return out;
  for (int i = 0; i < 6; ++i) {
    EngineRequest r;
    r.id = "r";
    r.id += std::to_string(i);
    // Shared prefixes (the same text cut at different lengths) hit the prefix cache.
    const std::vector<int32_t>& text = i % 2 == 0 ? golden->mtp_tokens : golden->prompt_ids;
    const size_t len = std::min<size_t>(text.size(), 140 + 37 * static_cast<size_t>(i));
    r.prompt_ids.assign(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(len));
    for (int32_t& t : r.prompt_ids) t %= static_cast<int32_t>(vocab);
    r.max_tokens = 24;
    r.ignore_eos = true;
    r.sampling.logprobs = 2;
    r.sampling.temperature = 0.0f;
    if (i % 3 == 1) {
      r.sampling.temperature = 0.8f;
      r.sampling.seed = 31 + i;
    }
    out.push_back(std::move(r));
  }
  return out;
}

// Runs the requests (the second half after the first finished, so they restore prefixes)
// and writes every request's tokens and logprobs to `file`. Returns an exit code.
int RunEngine(std::unique_ptr<HostModel> model, const Case& c, const fs::path& file) {
  const int64_t model_vocab = model->config().vocab_size;
  CpuRunnerOptions o;
  o.num_slots = 4;
  o.kv_tokens = c.kv_tokens;
  o.block_tokens = 128;
  o.prefix_caching = true;
  o.snapshot_fraction = 0.5;
  o.speculative = c.spec;
  auto runner = CpuModelRunner::Create(std::move(model), o);
  if (!runner.ok()) return 20;
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = 192;
  ec.scheduler.max_num_seqs = 4;
  Engine engine(ec, std::move(runner).value());
  const std::vector<EngineRequest> requests = Requests(model_vocab);
  std::vector<std::vector<int32_t>> tokens(requests.size());
  std::vector<std::vector<float>> logprobs(requests.size());
  std::string errors;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (i == requests.size() / 2) {
      for (int step = 0; step < 100000 && engine.Step(); ++step) {
      }
    }
    const Status s = engine.Submit(requests[i], [&, i](const EngineEvent& ev) {
      tokens[i].insert(tokens[i].end(), ev.token_ids.begin(), ev.token_ids.end());
      for (const SampleResult& x : ev.samples) logprobs[i].push_back(x.logprob);
      errors += ev.error;
    });
    if (!s.ok()) return 21;
  }
  for (int step = 0; step < 100000 && engine.Step(); ++step) {
  }
  if (!errors.empty()) {
    std::fprintf(stderr, "engine errors: %s\n", errors.c_str());
    return 22;
  }
  std::ofstream out(file);
  for (size_t i = 0; i < requests.size(); ++i) {
    for (int32_t t : tokens[i]) out << t << ' ';
    out << '\n';
    for (float l : logprobs[i]) out << l << ' ';
    out << '\n';
  }
  return out ? 0 : 23;
}

std::vector<std::vector<double>> ReadRows(const fs::path& file) {
  std::vector<std::vector<double>> rows;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    rows.emplace_back();
    std::istringstream s(line);
    double v = 0;
    while (s >> v) rows.back().push_back(v);
  }
  return rows;
}

class RankedEngineTest : public ::testing::TestWithParam<Case> {};

TEST_P(RankedEngineTest, GivesTheWholeModelsTokens) {
  const Case& c = GetParam();
  const fs::path dir = fs::path(::testing::TempDir()) / ("ranked_engine_" + c.name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  ASSERT_EQ(testing::RunRanks(1,
                              [&](int) {
                                auto model = deepseek_v4::Model::Load(ModelDir(c), 1);
                                if (!model.ok()) return 10;
                                return RunEngine(std::move(model).value(), c, dir / "whole.txt");
                              }),
            std::vector<int>{0});
  const int port = testing::FreeLoopbackPort();
  const std::vector<int> codes = testing::RunRanks(2, [&](int rank) {
    distributed::Rendezvous r;
    r.port = port;
    r.rank = rank;
    r.size = 2;
    auto comm = distributed::CreateGlooCommunicator(r);
    auto config = LoadModelConfig(ModelDir(c));
    auto checkpoint = Checkpoint::Open(ModelDir(c));
    if (!comm.ok() || !config.ok() || !checkpoint.ok()) return 10;
    auto model = deepseek_v4::Model::Create(*config, std::move(checkpoint).value(), 1,
                                            deepseek_v4::ShardSpec{rank, 2, c.ep}, comm->get());
    if (!model.ok()) return 11;
    if (rank == 1) return RunHostRank(**model, **comm).ok() ? 0 : 12;
    auto ranked = std::make_unique<RankedHostModel>(std::move(model).value(), std::move(comm).value());
    return RunEngine(std::move(ranked), c, dir / "sharded.txt");
  });
  ASSERT_EQ(codes, (std::vector<int>{0, 0}));
  const auto want = ReadRows(dir / "whole.txt"), got = ReadRows(dir / "sharded.txt");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); i += 2) {
    EXPECT_EQ(got[i], want[i]) << "request " << i / 2 << ": tokens";
    ASSERT_EQ(got[i + 1].size(), want[i + 1].size());
    for (size_t k = 0; k < want[i + 1].size(); ++k)
      EXPECT_NEAR(got[i + 1][k], want[i + 1][k], 1e-4) << "request " << i / 2 << ", logprob " << k;
  }
}

speculative::SpeculativeConfig Spec(speculative::Algorithm a, int32_t steps, int32_t tokens, int32_t topk) {
  speculative::SpeculativeConfig s;
  s.algorithm = a;
  s.num_steps = steps;
  s.num_draft_tokens = tokens;
  s.topk = topk;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Setups, RankedEngineTest,
    ::testing::Values(Case{"tp2", false, {}}, Case{"ep2", true, {}},
                      Case{"tp2_mtp", false, Spec(speculative::Algorithm::kMtp, 3, 0, 1)},
                      Case{"ep2_ddtree", true, Spec(speculative::Algorithm::kDdtree, 3, 7, 2)},
                      Case{"tp2_small_kv", false, {}, 1024},
                      Case{"tp2_block_drafter_ddtree", false, Spec(speculative::Algorithm::kDdtree, 4, 8, 2), 1 << 14, true},
                      Case{"ep2_block_drafter_mtp", true, Spec(speculative::Algorithm::kMtp, 4, 0, 1), 1 << 14, true}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace peregrine
