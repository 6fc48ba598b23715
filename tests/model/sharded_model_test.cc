// Tensor and expert parallel on the CPU: the model split over 2 and 4 ranks (processes over
// Gloo) gives the tokens of the whole model and its logits within fp32 rounding, on every
// fixture and the demo model; every rank holds the same logits, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>

#include "distributed/communicator.h"
#include "golden.h"
#include "model/deepseek_v4/model.h"
#include "rank_processes.h"

namespace peregrine::deepseek_v4 {
namespace {

namespace fs = std::filesystem;
using testing::ArgMax;

struct RankRun {
  std::vector<int32_t> tokens;  // greedy continuation
  std::vector<float> logits;    // prompt [T, V], each decode step [V], MTP [T - 1, V]
};

constexpr int kDecodeSteps = 6;

// The prompt in two chunks, greedy decode, then the MTP layer over the prompt.
Result<RankRun> Scenario(Model& model, std::span<const int32_t> prompt) {
  RankRun run;
  SequenceState state = model.NewSequence();
  std::vector<float> part;
  const size_t half = prompt.size() / 2;
  PG_RETURN_IF_ERROR(model.Forward(state, prompt.subspan(0, half), /*all_logits=*/true, &part));
  run.logits = part;
  PG_RETURN_IF_ERROR(model.Forward(state, prompt.subspan(half), /*all_logits=*/true, &part));
  run.logits.insert(run.logits.end(), part.begin(), part.end());
  const int64_t vocab = model.config().vocab_size;
  for (int i = 0; i < kDecodeSteps; ++i) {
    const auto next = static_cast<int32_t>(ArgMax(part.data() + part.size() - static_cast<size_t>(vocab), vocab));
    run.tokens.push_back(next);
    PG_RETURN_IF_ERROR(model.Forward(state, std::span(&next, 1), /*all_logits=*/false, &part));
    run.logits.insert(run.logits.end(), part.begin(), part.end());
  }
  if (model.has_mtp()) {
    PG_RETURN_IF_ERROR(model.MtpLogits(prompt, &part));
    run.logits.insert(run.logits.end(), part.begin(), part.end());
  }
  return run;
}

void Write(const fs::path& file, const RankRun& run) {
  std::ofstream out(file, std::ios::binary);
  const auto n = static_cast<uint64_t>(run.tokens.size()), m = static_cast<uint64_t>(run.logits.size());
  out.write(reinterpret_cast<const char*>(&n), sizeof n);
  out.write(reinterpret_cast<const char*>(run.tokens.data()), static_cast<std::streamsize>(n * sizeof(int32_t)));
  out.write(reinterpret_cast<const char*>(&m), sizeof m);
  out.write(reinterpret_cast<const char*>(run.logits.data()), static_cast<std::streamsize>(m * sizeof(float)));
}

RankRun Read(const fs::path& file) {
  RankRun run;
  std::ifstream in(file, std::ios::binary);
  uint64_t n = 0, m = 0;
  in.read(reinterpret_cast<char*>(&n), sizeof n);
  run.tokens.resize(n);
  in.read(reinterpret_cast<char*>(run.tokens.data()), static_cast<std::streamsize>(n * sizeof(int32_t)));
  in.read(reinterpret_cast<char*>(&m), sizeof m);
  run.logits.resize(m);
  in.read(reinterpret_cast<char*>(run.logits.data()), static_cast<std::streamsize>(m * sizeof(float)));
  return run;
}

// One rank (or, with size 1, the whole model without a communicator) writes its run.
int RankMain(const fs::path& model_dir, std::span<const int32_t> prompt, int rank, int size, bool ep, int port,
             const fs::path& out) {
  auto config = LoadModelConfig(model_dir);
  auto checkpoint = Checkpoint::Open(model_dir);
  if (!config.ok() || !checkpoint.ok()) return 10;
  std::unique_ptr<distributed::Communicator> comm;
  if (size > 1) {
    distributed::Rendezvous r;
    r.port = port;
    r.rank = rank;
    r.size = size;
    auto c = distributed::CreateGlooCommunicator(r);
    if (!c.ok()) return 11;
    comm = std::move(c).value();
  }
  auto model = Model::Create(*config, std::move(checkpoint).value(), 1, ShardSpec{rank, size, ep}, comm.get());
  if (!model.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, model.status().ToString().c_str());
    return 12;
  }
  auto run = Scenario(**model, prompt);
  if (!run.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, run.status().ToString().c_str());
    return 13;
  }
  Write(out / ("rank" + std::to_string(rank) + ".bin"), *run);
  return 0;
}

struct Case {
  fs::path dir;       // a fixture (model/ + golden.safetensors) or the demo model
  int size = 2;
  bool ep = false;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.dir.filename().string();
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n + (info.param.ep ? "_ep" : "_tp") + std::to_string(info.param.size);
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  std::vector<fs::path> dirs = testing::FixtureDirs();
  dirs.push_back(testing::SourceRoot() / "models/deepseek-v4-demo");
  for (const fs::path& d : dirs)
    for (int size : {2, 4})
      for (bool ep : {false, true}) cases.push_back({d, size, ep});
  return cases;
}

class ShardedModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedModelTest, MatchesTheWholeModel) {
  const Case& c = GetParam();
  const bool is_fixture = fs::exists(c.dir / "golden.safetensors");
  const fs::path model_dir = is_fixture ? c.dir / "model" : c.dir;
  std::vector<int32_t> prompt;
  if (is_fixture) {
    auto golden = testing::ReadGolden(c.dir / "golden.safetensors");
    ASSERT_TRUE(golden.ok());
    prompt = golden->prompt_ids;
  } else {
    prompt = {0, 128803, 2309, 4301, 304, 260, 3680, 16, 128804};  // a short chat turn's ids
  }
  const fs::path out = fs::path(::testing::TempDir()) / ("sharded_" + Name({c, 0}));
  fs::remove_all(out);
  fs::create_directories(out / "whole");
  ASSERT_EQ(testing::RunRanks(1, [&](int) { return RankMain(model_dir, prompt, 0, 1, false, 0, out / "whole"); }),
            std::vector<int>{0});
  const int port = testing::FreeLoopbackPort();
  const std::vector<int> codes = testing::RunRanks(
      c.size, [&](int rank) { return RankMain(model_dir, prompt, rank, c.size, c.ep, port, out); });
  ASSERT_EQ(codes, std::vector<int>(static_cast<size_t>(c.size), 0));

  const RankRun whole = Read(out / "whole/rank0.bin");
  const RankRun rank0 = Read(out / "rank0.bin");
  ASSERT_EQ(rank0.logits.size(), whole.logits.size());
  EXPECT_EQ(rank0.tokens, whole.tokens) << "greedy tokens differ from the whole model's";
  const double err = testing::RelativeL2(rank0.logits.data(), whole.logits.data(),
                                         static_cast<int64_t>(whole.logits.size()));
  double worst = 0;
  for (size_t i = 0; i < whole.logits.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(rank0.logits[i] - whole.logits[i])));
  std::printf("%s: rel L2 %.3e, worst %.3e over %zu logits\n", Name({c, 0}).c_str(), err, worst, whole.logits.size());
  EXPECT_LE(err, 1e-5);
  for (int r = 1; r < c.size; ++r) {
    const RankRun other = Read(out / ("rank" + std::to_string(r) + ".bin"));
    EXPECT_EQ(other.tokens, rank0.tokens);
    EXPECT_TRUE(other.logits == rank0.logits) << "rank " << r << " holds other logits than rank 0";
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ShardedModelTest, ::testing::ValuesIn(Cases()), Name);

TEST(ShardSpecTest, DimensionsThatDoNotSplitAreNamed) {
  auto config = LoadModelConfig(testing::SourceRoot() / "models/deepseek-v4-demo");
  ASSERT_TRUE(config.ok());
  EXPECT_TRUE(ValidateShard(*config, {0, 8, true}).ok());
  const Status three = ValidateShard(*config, {0, 3, false});
  EXPECT_EQ(three.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(three.message().find("num_attention_heads"), std::string::npos) << three.message();
  EXPECT_FALSE(ValidateShard(*config, {0, 16, true}).ok()) << "8 experts over 16 ranks";
  EXPECT_FALSE(ValidateShard(*config, {2, 2, false}).ok());
  auto checkpoint = Checkpoint::Open(testing::SourceRoot() / "models/deepseek-v4-demo");
  ASSERT_TRUE(checkpoint.ok());
  EXPECT_FALSE(Model::Create(*config, std::move(checkpoint).value(), 1, {0, 2, false}, nullptr).ok())
      << "a shard without its communicator";
}

}  // namespace
}  // namespace peregrine::deepseek_v4
