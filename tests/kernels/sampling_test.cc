// The sampling kernel vs peregrine::Sample() on the same logits, parameters, histories and
// seeds: tokens identical on every row, raw logprobs within 1e-5, top-N lists identical. Rows the
// kernel reports as overflow are finished by SampleOverflowRow, which must also match.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <random>
#include <sstream>

#include "backend/cuda/ops/sampling.h"
#include "gpu_test_util.h"
#include "kernels/sampling.cuh"
#include "sampling/cdf_walk.h"
#include "sampling/device_rows.h"
#include "sampling/sampler.h"
#include "sampling/weights.h"

namespace peregrine::testing {
namespace {

constexpr int kTop = kernels::kSamplingMaxTopLogprobs;
constexpr float kInf = std::numeric_limits<float>::infinity();

enum class Shape { kPeaked, kFlat, kTies, kSpecial };
const char* ShapeName(Shape s) {
  switch (s) {
    case Shape::kPeaked: return "peaked";
    case Shape::kFlat: return "flat";
    case Shape::kTies: return "ties";
    case Shape::kSpecial: return "nan/-inf";
  }
  return "?";
}

std::vector<float> MakeLogits(Shape shape, int64_t vocab, std::mt19937& rng) {
  std::vector<float> x(static_cast<size_t>(vocab));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> small(-4, 4);
  for (float& v : x) {
    switch (shape) {
      case Shape::kPeaked: v = 3.0f * normal(rng); break;
      case Shape::kFlat: v = 0.05f * normal(rng); break;
      case Shape::kTies: v = 0.5f * static_cast<float>(small(rng)); break;
      case Shape::kSpecial: v = 2.0f * normal(rng); break;
    }
  }
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  if (shape == Shape::kPeaked) {
    for (int i = 0; i < 3; ++i) x[static_cast<size_t>(pick(rng))] += 12.0f + 2.0f * static_cast<float>(i);
  }
  if (shape == Shape::kSpecial) {
    for (int64_t i = 0; i < std::max<int64_t>(1, vocab / 10); ++i) {
      x[static_cast<size_t>(pick(rng))] = (i % 2 == 0) ? -kInf : std::numeric_limits<float>::quiet_NaN();
    }
    if (vocab > 8) x[static_cast<size_t>(pick(rng))] = -0.0f;
  }
  return x;
}

struct Case {
  SamplingParams params;
  std::string name;
};

std::vector<Case> ParamSets(int64_t vocab) {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto edit) {
    SamplingParams p;
    edit(p);
    cases.push_back({p, std::move(name)});
  };
  add("greedy", [](SamplingParams& p) { p.temperature = 0.0f; });
  for (float t : {0.5f, 1.0f, 1.7f}) add("T=" + std::to_string(t), [t](SamplingParams& p) { p.temperature = t; });
  // 500 and 1000: top-k's bounded gather overflows or cannot bound (more than 512 threads'
  // worth), so the radix passes run on ordinary rows too.
  for (int64_t k : {int64_t{1}, int64_t{2}, int64_t{50}, int64_t{500}, int64_t{1000}, vocab}) {
    add("top_k=" + std::to_string(k), [k](SamplingParams& p) { p.top_k = static_cast<int32_t>(k); });
  }
  for (float tp : {0.1f, 0.9f, 1.0f}) add("top_p=" + std::to_string(tp), [tp](SamplingParams& p) { p.top_p = tp; });
  for (float mp : {0.05f, 0.5f}) add("min_p=" + std::to_string(mp), [mp](SamplingParams& p) { p.min_p = mp; });
  add("T=0.7 top_k=50 top_p=0.9", [](SamplingParams& p) { p.temperature = 0.7f; p.top_k = 50; p.top_p = 0.9f; });
  add("T=1.3 top_p=0.8 min_p=0.05", [](SamplingParams& p) { p.temperature = 1.3f; p.top_p = 0.8f; p.min_p = 0.05f; });
  add("top_k=20 min_p=0.1", [](SamplingParams& p) { p.top_k = 20; p.min_p = 0.1f; });
  add("top_k=50 top_p=0.5 min_p=0.2", [](SamplingParams& p) { p.top_k = 50; p.top_p = 0.5f; p.min_p = 0.2f; });
  add("penalties T=1", [](SamplingParams& p) {
    p.repetition_penalty = 1.3f; p.presence_penalty = 0.5f; p.frequency_penalty = 0.7f;
  });
  add("penalties greedy", [](SamplingParams& p) {
    p.temperature = 0.0f; p.repetition_penalty = 1.8f; p.presence_penalty = -1.0f; p.frequency_penalty = 2.0f;
  });
  add("bias+penalties top_p=0.9", [](SamplingParams& p) {
    p.top_p = 0.9f; p.repetition_penalty = 0.8f; p.frequency_penalty = 0.3f;
    p.logit_bias = {{0, 5.0f}, {2, -100.0f}, {7, 30.0f}};
  });
  add("bias top_k=2", [](SamplingParams& p) { p.top_k = 2; p.logit_bias = {{1, 100.0f}, {0, 100.0f}}; });
  // Logprobs on a subset of the sets, with every top-N size class.
  for (size_t i = 0; i < cases.size(); ++i) cases[i].params.logprobs = (i % 3 == 0) ? -1 : static_cast<int32_t>(i % 21);
  return cases;
}

// Prompt and history of one request: tokens repeat, so the counts are > 1.
void MakeHistory(int64_t vocab, std::mt19937& rng, std::vector<int32_t>& prompt, std::vector<int32_t>& generated) {
  std::uniform_int_distribution<int64_t> pick(0, std::min<int64_t>(vocab, 64) - 1);
  std::uniform_int_distribution<int64_t> any(0, vocab - 1);
  prompt.clear();
  generated.clear();
  for (int i = 0; i < 24; ++i) prompt.push_back(static_cast<int32_t>(i % 2 ? pick(rng) : any(rng)));
  for (int i = 0; i < 16; ++i) generated.push_back(static_cast<int32_t>(i % 2 ? pick(rng) : any(rng)));
}

struct Row {
  std::vector<float> logits;
  SamplingParams params;
  std::string what;
  std::unique_ptr<SequenceSamplingState> host_state, device_state;
  std::mt19937_64 rng_before;
};

class SamplingTest : public GpuTest {
 protected:
  struct DeviceSide {
    cuda::DeviceBuffer logits, rows, offsets, edits, edit_raw, tokens, logprobs, top_tokens, top_logprobs, status;
    cuda::SamplingArgs args;
  };

  // Uploads the batch and fills args (the output buffers poisoned).
  void Prepare(const std::vector<Row>& rows, const DeviceSamplingBatch& batch, int64_t vocab, DeviceSide& d) {
    const int64_t b = static_cast<int64_t>(rows.size());
    std::vector<float> all;
    for (const Row& r : rows) all.insert(all.end(), r.logits.begin(), r.logits.end());
    d.logits = Upload(all);
    d.rows = UploadBytes(batch.rows.data(), batch.rows.size() * sizeof(DeviceSamplingRow));
    d.offsets = Upload(batch.edit_offsets);
    const int64_t e = static_cast<int64_t>(batch.edits.size());
    if (e > 0) {
      d.edits = UploadBytes(batch.edits.data(), batch.edits.size() * sizeof(DeviceLogitEdit));
      d.edit_raw = Poisoned(static_cast<size_t>(e) * 4);
    }
    d.tokens = Poisoned(static_cast<size_t>(b) * 4);
    d.logprobs = Poisoned(static_cast<size_t>(b) * 4);
    d.top_tokens = Poisoned(static_cast<size_t>(b) * kTop * 4);
    d.top_logprobs = Poisoned(static_cast<size_t>(b) * kTop * 4);
    d.status = Poisoned(static_cast<size_t>(b) * 4);
    cuda::SamplingArgs& a = d.args;
    a.logits = View(d.logits, DType::kF32, {b, vocab});
    a.rows = View(d.rows, DType::kU8, {b, 32});
    a.edit_offsets = View(d.offsets, DType::kI32, {b + 1});
    a.edits = e > 0 ? View(d.edits, DType::kU8, {e, 16}) : Tensor{};
    a.edit_raw = e > 0 ? View(d.edit_raw, DType::kF32, {e}) : Tensor{};
    a.tokens = View(d.tokens, DType::kI32, {b});
    a.logprobs = View(d.logprobs, DType::kF32, {b});
    a.top_tokens = View(d.top_tokens, DType::kI32, {b, kTop});
    a.top_logprobs = View(d.top_logprobs, DType::kF32, {b, kTop});
    a.status = View(d.status, DType::kI32, {b});
  }

  // Host Sample() on every row vs the device results; the first mismatch fails with its details.
  void Compare(std::vector<Row>& rows, const DeviceSamplingBatch& batch, int64_t vocab, DeviceSide& d,
               int* num_overflow) {
    const size_t b = rows.size();
    const auto tokens = Download<int32_t>(d.tokens, b);
    const auto logprobs = Download<float>(d.logprobs, b);
    const auto top_tokens = Download<int32_t>(d.top_tokens, b * kTop);
    const auto top_logprobs = Download<float>(d.top_logprobs, b * kTop);
    const auto status = Download<int32_t>(d.status, b);
    const auto edited = Download<float>(d.logits, b * static_cast<size_t>(vocab));
    const auto edit_raw = batch.edits.empty() ? std::vector<float>{} : Download<float>(d.edit_raw, batch.edits.size());
    for (size_t i = 0; i < b; ++i) {
      Row& r = rows[i];
      std::vector<float> host_logits = r.logits;
      const SampleResult want = Sample(host_logits, r.params, *r.host_state);
      SampleResult got;
      const size_t e0 = static_cast<size_t>(batch.edit_offsets[i]), e1 = static_cast<size_t>(batch.edit_offsets[i + 1]);
      if (status[i] == kernels::kSamplingOverflow) {
        ++*num_overflow;
        std::vector<float> row(edited.begin() + static_cast<std::ptrdiff_t>(i * vocab),
                               edited.begin() + static_cast<std::ptrdiff_t>((i + 1) * vocab));
        got = SampleOverflowRow(row, std::span(batch.edits).subspan(e0, e1 - e0),
                                std::span(edit_raw).subspan(e0, e1 - e0), r.params, *r.device_state, r.rng_before);
      } else {
        ASSERT_EQ(status[i], kernels::kSamplingOk) << "row " << i << " " << r.what;
        got.token = tokens[i];
        got.logprob = logprobs[i];
        r.device_state->Append(got.token);
        const int32_t n = std::min<int32_t>(r.params.logprobs, static_cast<int32_t>(vocab));
        for (int32_t j = 0; j < n; ++j) got.top_logprobs.push_back({top_tokens[i * kTop + j], top_logprobs[i * kTop + j]});
      }
      std::ostringstream where;
      where << "first mismatching row " << i << ": " << r.what << " V=" << vocab << " T=" << r.params.temperature
            << " top_k=" << r.params.top_k << " top_p=" << r.params.top_p << " min_p=" << r.params.min_p
            << " logprobs=" << r.params.logprobs << " edits=" << (e1 - e0) << " u=" << batch.rows[i].u
            << " status=" << status[i];
      ASSERT_EQ(got.token, want.token) << where.str() << " (device token " << got.token << ", host token "
                                       << want.token << ")";
      if (r.params.logprobs >= 0) {
        ASSERT_TRUE(std::fabs(got.logprob - want.logprob) <= 1e-5f || got.logprob == want.logprob)
            << where.str() << " logprob device " << got.logprob << " host " << want.logprob;
        ASSERT_EQ(got.top_logprobs.size(), want.top_logprobs.size()) << where.str();
        for (size_t j = 0; j < want.top_logprobs.size(); ++j) {
          ASSERT_EQ(got.top_logprobs[j].token, want.top_logprobs[j].token) << where.str() << " top entry " << j;
          const float g = got.top_logprobs[j].logprob, w = want.top_logprobs[j].logprob;
          ASSERT_TRUE(std::fabs(g - w) <= 1e-5f || g == w) << where.str() << " top entry " << j << " " << g << " vs " << w;
        }
      }
    }
  }

  // Rows of every shape x parameter set x seed at one vocabulary size.
  // One launch per step over every row: 23 parameter sets x `shapes` x `seeds`.
  void Sweep(int64_t vocab, int seeds, int steps,
             std::initializer_list<Shape> shapes = {Shape::kPeaked, Shape::kFlat, Shape::kTies, Shape::kSpecial}) {
    std::mt19937 rng(static_cast<uint32_t>(vocab * 7 + 1));
    std::vector<Row> rows;
    for (Shape shape : shapes) {
      for (const Case& c : ParamSets(vocab)) {
        for (int seed = 0; seed < seeds; ++seed) {
          Row r;
          r.params = c.params;
          r.params.seed = 1000u * static_cast<uint64_t>(seed) + rows.size();
          r.what = std::string(ShapeName(shape)) + " " + c.name;
          std::vector<int32_t> prompt, generated;
          MakeHistory(vocab, rng, prompt, generated);
          r.host_state = std::make_unique<SequenceSamplingState>(r.params, prompt);
          r.device_state = std::make_unique<SequenceSamplingState>(r.params, prompt);
          for (int32_t t : generated) {
            r.host_state->Append(t);
            r.device_state->Append(t);
          }
          r.logits = MakeLogits(shape, vocab, rng);
          rows.push_back(std::move(r));
        }
      }
    }
    int num_overflow = 0;
    // Several steps per request: the RNG streams and histories must stay in step.
    for (int step = 0; step < steps; ++step) {
      SCOPED_TRACE("V=" + std::to_string(vocab) + " step " + std::to_string(step));
      DeviceSamplingBatch batch;
      for (Row& r : rows) AppendDeviceRow(r.params, *r.device_state, vocab, batch, &r.rng_before);
      DeviceSide d;
      Prepare(rows, batch, vocab, d);
      PG_ASSERT_OK(cuda::Sample(d.args, stream_.get()));
      Sync();
      Compare(rows, batch, vocab, d, &num_overflow);
      if (HasFatalFailure()) return;
      for (Row& r : rows) r.logits = MakeLogits(Shape::kPeaked, vocab, rng);
    }
    std::printf("V=%lld: %zu rows x %d steps, %d finished on the host (overflow)\n", static_cast<long long>(vocab),
                rows.size(), steps, num_overflow);
  }
};

TEST_F(SamplingTest, MatchesHostAwkwardVocab) {
  // 4099 and 20001: odd rows (scalar loads) longer than one batch of loads per thread.
  for (int64_t vocab : {1, 3, 1000, 4099, 20001}) {
    Sweep(vocab, 6, 3);
    if (HasFatalFailure()) return;
  }
}

TEST_F(SamplingTest, MatchesHostFullVocab) { Sweep(129280, 2, 2); }

// Batches of 23 and 46 rows: on sm_90 the launcher gives each row a cluster of 4 and of 2 CTAs,
// each passing over its range of 1024-blocks; the sweeps above (84+ rows) take one CTA per
// row. 4099 and 1000 leave some ranks an empty range (5 blocks over 4 CTAs, 1 over 2).
TEST_F(SamplingTest, MatchesHostSmallBatches) {
  Sweep(129280, 1, 2, {Shape::kPeaked});
  if (HasFatalFailure()) return;
  Sweep(129280, 1, 2, {Shape::kFlat, Shape::kSpecial});
  if (HasFatalFailure()) return;
  Sweep(20001, 1, 2, {Shape::kTies});
  if (HasFatalFailure()) return;
  Sweep(4099, 1, 2, {Shape::kPeaked});
  if (HasFatalFailure()) return;
  Sweep(1000, 1, 2, {Shape::kTies, Shape::kSpecial});
  if (HasFatalFailure()) return;
  Sweep(3, 1, 2, {Shape::kSpecial});
}

// The same rows alone in a cluster of 4 CTAs each (8 rows), of 2 (48 rows) and in one CTA
// (100 rows): every output bit for bit the same, so a request's tokens and logprobs do not
// depend on its batch. The rows include top-p over weights mostly below 2^-39, whose last
// bucket the device sums in its own (split-independent) way, not the host's.
TEST_F(SamplingTest, SameOutputsAtEveryClusterSize) {
  constexpr int64_t kVocab = 20001;
  const std::vector<Case> cases = ParamSets(kVocab);
  constexpr size_t kRows = 8;
  auto logits_of = [&](size_t i) {
    std::mt19937 rng(static_cast<uint32_t>(500 + i));
    if (i % 4 != 3) return MakeLogits(i % 2 == 0 ? Shape::kPeaked : Shape::kTies, kVocab, rng);
    std::uniform_real_distribution<float> deep(-60.0f, -31.0f);
    std::vector<float> x(static_cast<size_t>(kVocab));
    for (float& v : x) v = deep(rng);
    x[17] = 0.0f;
    x[4000] = -1.0f;
    return x;
  };
  auto params_of = [&](size_t i) {
    SamplingParams p = cases[(3 * i) % cases.size()].params;
    if (i % 4 == 3) {
      p = SamplingParams{};
      p.top_p = 0.9999f;
      p.logprobs = 5;
    }
    p.seed = 90 + i;
    return p;
  };
  struct Outputs {
    std::vector<int32_t> tokens, top_tokens, status;
    std::vector<float> logprobs, top_logprobs;
  };
  std::vector<Outputs> runs;
  for (size_t batch_rows : {size_t{8}, size_t{48}, size_t{100}}) {
    std::vector<Row> rows;
    DeviceSamplingBatch batch;
    for (size_t i = 0; i < batch_rows; ++i) {
      Row r;
      r.params = params_of(i % kRows);
      r.logits = logits_of(i % kRows);
      r.device_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
      AppendDeviceRow(r.params, *r.device_state, kVocab, batch);
      rows.push_back(std::move(r));
    }
    DeviceSide d;
    Prepare(rows, batch, kVocab, d);
    PG_ASSERT_OK(cuda::Sample(d.args, stream_.get()));
    Sync();
    Outputs o;
    o.tokens = Download<int32_t>(d.tokens, kRows);
    o.status = Download<int32_t>(d.status, kRows);
    o.logprobs = Download<float>(d.logprobs, kRows);
    o.top_tokens = Download<int32_t>(d.top_tokens, kRows * kTop);
    o.top_logprobs = Download<float>(d.top_logprobs, kRows * kTop);
    runs.push_back(std::move(o));
  }
  for (size_t run = 1; run < runs.size(); ++run) {
    SCOPED_TRACE("run " + std::to_string(run) + " vs the 8-row batch");
    EXPECT_EQ(runs[run].tokens, runs[0].tokens);
    EXPECT_EQ(runs[run].status, runs[0].status);
    EXPECT_EQ(runs[run].top_tokens, runs[0].top_tokens);
    for (size_t i = 0; i < kRows; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(runs[run].logprobs[i]), std::bit_cast<uint32_t>(runs[0].logprobs[i])) << "row " << i;
    }
    for (size_t i = 0; i < kRows * kTop; ++i) {
      EXPECT_EQ(std::bit_cast<uint32_t>(runs[run].top_logprobs[i]), std::bit_cast<uint32_t>(runs[0].top_logprobs[i]))
          << "top entry " << i;
    }
  }
}

// The full-vocabulary walk with chosen draws against the host's WalkFullVocab: flat rows
// (every weight 1, so cumulatives are integers) with targets on block and token boundaries,
// where the kernel's parallel walk inside a block cannot call the crossing and walks as the
// host does, and just off them, where it can; then peaked rows with random draws. One CTA
// per row (64 rows) and a cluster per row (8 rows).
TEST_F(SamplingTest, FullVocabWalkMatchesTheHostAtBoundaries) {
  struct Draw {
    int64_t vocab;
    bool flat;
    double u;
  };
  std::vector<Draw> draws;
  for (int64_t vocab : {4096, 129280}) {
    const double v = static_cast<double>(vocab);
    for (double u : {0.0, 0.25, 0.5, 0.75, 0.5 + 0x1p-20, (1024.0 + 1.5) / v, 1023.5 / v, 1.0 - 0x1p-53,
                     2048.0 / v, (2048.0 - 0x1p-30) / v, (3000.0 + 0x1p-40) / v})
      draws.push_back({vocab, true, u});
    std::mt19937_64 pick(static_cast<uint64_t>(vocab));
    for (int i = 0; i < 24; ++i) draws.push_back({vocab, false, UnitIntervalFromBits(pick())});
  }
  for (int64_t vocab : {4096, 129280}) {
    for (size_t batch_rows : {size_t{64}, size_t{8}}) {
      std::vector<Row> rows;
      std::vector<double> us;
      DeviceSamplingBatch batch;
      std::mt19937 rng(7);
      for (size_t k = 0; rows.size() < batch_rows; k = (k + 1) % draws.size()) {
        if (draws[k].vocab != vocab) continue;
        Row r;
        r.params.temperature = 1.0f;
        r.params.seed = 1;
        r.what = draws[k].flat ? "flat" : "peaked";
        r.logits = draws[k].flat ? std::vector<float>(static_cast<size_t>(vocab), 0.0f) : MakeLogits(Shape::kPeaked, vocab, rng);
        r.host_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
        r.device_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
        AppendDeviceRow(r.params, *r.device_state, vocab, batch);
        batch.rows.back().u = draws[k].u;
        us.push_back(draws[k].u);
        rows.push_back(std::move(r));
      }
      DeviceSide d;
      Prepare(rows, batch, vocab, d);
      PG_ASSERT_OK(cuda::Sample(d.args, stream_.get()));
      Sync();
      const auto tokens = Download<int32_t>(d.tokens, rows.size());
      const auto status = Download<int32_t>(d.status, rows.size());
      for (size_t i = 0; i < rows.size(); ++i) {
        const std::vector<float>& x = rows[i].logits;
        const float mx = *std::max_element(x.begin(), x.end());
        const int32_t want = WalkFullVocab(x, mx, InverseTemperature(1.0f), us[i]);
        ASSERT_EQ(status[i], kernels::kSamplingOk) << rows[i].what << " u=" << us[i];
        EXPECT_EQ(tokens[i], want) << rows[i].what << " V=" << vocab << " u=" << us[i] << " rows " << rows.size();
      }
    }
  }
}

TEST_F(SamplingTest, AllMaskedRows) {
  // Every logit -inf or NaN: the host still returns an id in the vocabulary.
  for (float fill : {-kInf, std::numeric_limits<float>::quiet_NaN()}) {
    for (const Case& c : ParamSets(1000)) {
      std::vector<Row> rows(1);
      Row& r = rows[0];
      r.params = c.params;
      r.params.seed = 5;
      r.what = "all masked " + c.name;
      r.logits.assign(1000, fill);
      r.logits[3] = -kInf;
      r.host_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
      r.device_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
      DeviceSamplingBatch batch;
      AppendDeviceRow(r.params, *r.device_state, 1000, batch, &r.rng_before);
      DeviceSide d;
      Prepare(rows, batch, 1000, d);
      PG_ASSERT_OK(cuda::Sample(d.args, stream_.get()));
      Sync();
      int overflow = 0;
      Compare(rows, batch, 1000, d, &overflow);
      if (HasFatalFailure()) return;
    }
  }
}

TEST_F(SamplingTest, GraphReplayReadsLogitsAndDrawsInPlace) {
  constexpr int64_t kVocab = 129280;
  std::mt19937 rng(77);
  std::vector<Row> rows;
  const std::vector<Case> cases = ParamSets(kVocab);
  for (size_t i = 0; i < 16; ++i) {
    Row r;
    r.params = cases[i % cases.size()].params;
    r.params.seed = 40 + i;
    r.what = "graph " + cases[i % cases.size()].name;
    r.host_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
    r.device_state = std::make_unique<SequenceSamplingState>(r.params, std::span<const int32_t>());
    r.logits = MakeLogits(Shape::kPeaked, kVocab, rng);
    rows.push_back(std::move(r));
  }
  // The edit lists change size from step to step; a captured step has none (rows without
  // penalties or bias), so only the logits and the rows change between replays.
  for (Row& r : rows) {
    r.params.logit_bias.clear();
    r.params.repetition_penalty = 1.0f;
    r.params.presence_penalty = r.params.frequency_penalty = 0.0f;
  }
  DeviceSamplingBatch batch;
  for (Row& r : rows) AppendDeviceRow(r.params, *r.device_state, kVocab, batch, &r.rng_before);
  DeviceSide d;
  Prepare(rows, batch, kVocab, d);
  PG_ASSERT_OK(cuda::Graph::BeginCapture(stream_.get()));
  const Status launched = cuda::Sample(d.args, stream_.get());
  Result<cuda::Graph> graph = cuda::Graph::EndCapture(stream_.get());
  PG_ASSERT_OK(launched);
  PG_ASSERT_OK(graph.status());
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("replay " + std::to_string(step));
    if (step > 0) {
      for (Row& r : rows) r.logits = MakeLogits(Shape::kPeaked, kVocab, rng);
      batch.Clear();
      for (Row& r : rows) AppendDeviceRow(r.params, *r.device_state, kVocab, batch, &r.rng_before);
      std::vector<float> all;
      for (const Row& r : rows) all.insert(all.end(), r.logits.begin(), r.logits.end());
      CopyIn(d.logits, all);
      CopyIn(d.rows, batch.rows.data(), batch.rows.size() * sizeof(DeviceSamplingRow));
      Poison(d.tokens);
    }
    PG_ASSERT_OK(graph.value().Launch(stream_.get()));
    Sync();
    int overflow = 0;
    Compare(rows, batch, kVocab, d, &overflow);
    if (HasFatalFailure()) return;
  }
}

TEST_F(SamplingTest, RejectsBadArguments) {
  cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::SamplingArgs a;
  a.logits = View(buf, DType::kF32, {2, 100});
  a.rows = View(buf, DType::kU8, {2, 32});
  a.edit_offsets = View(buf, DType::kI32, {3});
  a.tokens = View(buf, DType::kI32, {2});
  a.logprobs = View(buf, DType::kF32, {2});
  a.top_tokens = View(buf, DType::kI32, {2, kTop});
  a.top_logprobs = View(buf, DType::kF32, {2, kTop});
  a.status = View(buf, DType::kI32, {2});
  cuda::SamplingArgs bad = a;
  bad.rows = View(buf, DType::kU8, {2, 24});
  EXPECT_EQ(cuda::Sample(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.edit_offsets = View(buf, DType::kI32, {2});
  EXPECT_EQ(cuda::Sample(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.edits = View(buf, DType::kU8, {4, 16});  // edits without edit_raw
  EXPECT_EQ(cuda::Sample(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.logits = View(buf, DType::kBF16, {2, 100});
  EXPECT_EQ(cuda::Sample(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
  bad = a;
  bad.tokens.device = ::peregrine::Device::kCpu;
  EXPECT_EQ(cuda::Sample(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
