// MoE kernels vs CPU references: routing (exact ids, weights to 1e-6), the expert bookkeeping
// (exact), gate-up, down and combine stage by stage (each stage fed the device's previous
// output, so a failure names the stage), one end-to-end check against deepseek_v4::Moe, a
// CUDA-graph replay with rewritten inputs, and the launchers' argument checks.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <random>
#include <utility>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/thread_pool.h"
#include "backend/cuda/ops/moe.h"
#include "config/model_config.h"
#include "gpu_test_util.h"
#include "model/deepseek_v4/layers.h"
#include "model/dequant.h"

namespace peregrine::testing {
namespace {

using cuda::MoeMxfp4Kernel;
using cuda::MoeWeightFormat;

// ---------------------------------------------------------------- CPU references

struct Routing {
  std::vector<int32_t> ids;     // [N, K]
  std::vector<float> weights;   // [N, K]
};

// moe.cc's router on precomputed logits, with hash ids as i32 and out-of-range tokens -> -1.
Routing RouteRef(const std::vector<float>& logits, const std::vector<float>* bias, const std::vector<int32_t>* tid2eid,
                 const std::vector<int32_t>* token_ids, int64_t n, int64_t e_n, int64_t k_n, float scale) {
  Routing r;
  r.ids.assign(static_cast<size_t>(n * k_n), -1);
  r.weights.assign(r.ids.size(), 0.0f);
  std::vector<float> st(static_cast<size_t>(e_n));
  std::vector<int64_t> order(static_cast<size_t>(e_n));
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < e_n; ++e) st[e] = std::sqrt(cpu::Softplus(logits[static_cast<size_t>(t * e_n + e)]));
    int32_t* ids = r.ids.data() + t * k_n;
    if (bias != nullptr) {
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + k_n, order.end(), [&](int64_t a, int64_t b) {
        const float sa = st[a] + (*bias)[a], sb = st[b] + (*bias)[b];
        return sa != sb ? sa > sb : a < b;
      });
      for (int64_t k = 0; k < k_n; ++k) ids[k] = static_cast<int32_t>(order[k]);
    } else {
      const int32_t tok = (*token_ids)[t];
      const int64_t vocab = static_cast<int64_t>(tid2eid->size()) / k_n;
      for (int64_t k = 0; k < k_n; ++k) {
        const int32_t id = tok >= 0 && tok < vocab ? (*tid2eid)[tok * k_n + k] : -1;
        ids[k] = id >= 0 && id < e_n ? id : -1;
      }
    }
    float sum = 0.0f;
    for (int64_t k = 0; k < k_n; ++k) sum += ids[k] >= 0 ? st[ids[k]] : 0.0f;
    const float norm = scale / (sum + 1e-20f);
    for (int64_t k = 0; k < k_n; ++k) r.weights[t * k_n + k] = ids[k] >= 0 ? st[ids[k]] * norm : 0.0f;
  }
  return r;
}

void AlignRef(const std::vector<int32_t>& ids, int64_t e_n, std::vector<int32_t>& offsets,
              std::vector<int32_t>& sorted) {
  offsets.assign(static_cast<size_t>(e_n + 1), 0);
  for (int32_t id : ids)
    if (id >= 0 && id < e_n) ++offsets[id + 1];
  for (int64_t e = 0; e < e_n; ++e) offsets[e + 1] += offsets[e];
  sorted.clear();
  for (int64_t e = 0; e < e_n; ++e)
    for (size_t a = 0; a < ids.size(); ++a)
      if (ids[a] == e) sorted.push_back(static_cast<int32_t>(a));
}

double Dot(const float* a, const float* b, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

float SwiGlu(float g, float u, float limit) {
  if (limit > 0.0f) {
    g = std::fmin(g, limit);
    u = std::clamp(u, -limit, limit);
  }
  return cpu::Silu(g) * u;
}

// One stacked expert matrix on both sides: the device bytes and the f32 values they mean.
struct Matrix {
  std::vector<uint8_t> weight;  // bf16 or packed e2m1 bytes
  std::vector<uint8_t> scale;   // ue8m0 (MXFP4)
  std::vector<float> values;    // [E, R, C] what the device should compute with
};

uint32_t NextRandom(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<uint32_t>(state >> 33);
}

Matrix MakeMatrix(uint64_t seed, int64_t e_n, int64_t rows, int64_t cols, MoeWeightFormat format) {
  Matrix m;
  const size_t count = static_cast<size_t>(e_n * rows * cols);
  uint64_t state = seed * 2654435761ull + 1;
  m.values.resize(count);
  switch (format) {
    case MoeWeightFormat::kBF16: {
      // Uniform with the variance of N(0, 1/cols), cheap enough for the large shapes.
      const float amp = std::sqrt(3.0f / static_cast<float>(cols));
      m.weight.resize(count * 2);
      for (size_t i = 0; i < count; ++i) {
        const float v = (static_cast<float>(NextRandom(state)) * 0x1p-31f * 2.0f - 1.0f) * amp;
        const uint16_t b = F32ToBF16(v);
        m.values[i] = BF16ToF32(b);
        std::memcpy(m.weight.data() + 2 * i, &b, 2);
      }
      break;
    }
    case MoeWeightFormat::kMxfp4: {
      m.weight.resize(count / 2);
      m.scale.resize(count / 32);
      for (uint8_t& b : m.weight) b = static_cast<uint8_t>(NextRandom(state));
      // e2m1 values reach 6: scales near 2^-2 / sqrt(cols) keep the products O(1).
      const int base = 127 - 3 - static_cast<int>(std::log2(static_cast<double>(cols)) / 2);
      for (uint8_t& s : m.scale) s = static_cast<uint8_t>(base + static_cast<int>(NextRandom(state) % 5) - 2);
      DequantMxfp4(m.weight.data(), e_n * rows, cols, m.scale.data(), m.values.data());
      break;
    }
  }
  return m;
}

// ---------------------------------------------------------------- the case

struct MoeCase {
  int64_t n, e, k, d, i;
  bool hash = false;
  MoeWeightFormat format = MoeWeightFormat::kBF16;
  float limit = 0.0f;
  bool ties = false;        // logits on a coarse grid and no bias: many exact ties
  bool hot_expert = false;  // one expert chosen by every token
  bool shared = true;
  int num_ctas = 0;         // gate-up / down persistent grid; 0: one full wave
  MoeMxfp4Kernel kernel = MoeMxfp4Kernel::kAuto;
};

std::string Name(const MoeCase& c) {
  return "N=" + std::to_string(c.n) + " E=" + std::to_string(c.e) + " K=" + std::to_string(c.k) +
         " D=" + std::to_string(c.d) + " I=" + std::to_string(c.i) + (c.hash ? " hash" : " learned") +
         (c.format == MoeWeightFormat::kBF16 ? " bf16" : " mxfp4") + " limit=" + std::to_string(c.limit) +
         (c.ties ? " ties" : "") + (c.hot_expert ? " hot-expert" : "") + (c.shared ? " shared" : "") +
         (c.num_ctas > 0 ? " ctas=" + std::to_string(c.num_ctas) : "") +
         (c.kernel == MoeMxfp4Kernel::kCudaCore ? " cuda-core" : "");
}

// Host inputs of one case.
struct Inputs {
  std::vector<float> x;       // [N, D] bf16-rounded
  std::vector<float> logits;  // [N, E]
  std::vector<float> bias;    // [E]
  std::vector<int32_t> tid2eid, token_ids;
  std::vector<float> shared;  // [N, D] bf16-rounded
  Matrix w1, w3, w2;
  int64_t vocab = 0;
};

Inputs MakeInputs(const MoeCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  Inputs in;
  in.x = RoundedBF16(RandomNormal(rng, static_cast<size_t>(c.n * c.d)));
  in.logits = RandomNormal(rng, static_cast<size_t>(c.n * c.e), 1.5f);
  in.bias = RandomNormal(rng, static_cast<size_t>(c.e), 0.3f);
  if (c.ties) {
    for (float& l : in.logits) l = std::round(l);
    std::fill(in.bias.begin(), in.bias.end(), 0.0f);
    if (c.n > 0) std::fill(in.logits.begin(), in.logits.begin() + c.e, 0.25f);  // token 0: all equal
  }
  if (c.hot_expert) in.bias[static_cast<size_t>(c.e / 2)] = 100.0f;
  in.vocab = 97;
  in.tid2eid.resize(static_cast<size_t>(in.vocab * c.k));
  for (int64_t v = 0; v < in.vocab; ++v) {
    // Distinct experts per row, as the checkpoint's table has.
    std::vector<int32_t> perm(static_cast<size_t>(c.e));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    if (c.hot_expert) std::swap(perm[0], *std::find(perm.begin(), perm.end(), static_cast<int32_t>(c.e / 2)));
    std::copy_n(perm.begin(), c.k, in.tid2eid.begin() + v * c.k);
  }
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(in.vocab - 1));
  for (int64_t t = 0; t < c.n; ++t) in.token_ids.push_back(tok(rng));
  if (c.n >= 3 && !c.hot_expert) in.token_ids[2] = -5;  // out of range: no experts, weight 0
  in.shared = RoundedBF16(RandomNormal(rng, static_cast<size_t>(c.n * c.d), 0.5f));
  in.w1 = MakeMatrix(seed * 3 + 0, c.e, c.i, c.d, c.format);
  in.w3 = MakeMatrix(seed * 3 + 1, c.e, c.i, c.d, c.format);
  in.w2 = MakeMatrix(seed * 3 + 2, c.e, c.d, c.i, c.format);
  return in;
}

// Rows of `values` ([rows, width]) whose assignment has a valid expert.
std::vector<float> ValidRows(const std::vector<float>& values, const std::vector<int32_t>& ids, int64_t width) {
  std::vector<float> out;
  for (size_t a = 0; a < ids.size(); ++a)
    if (ids[a] >= 0) out.insert(out.end(), values.begin() + a * width, values.begin() + (a + 1) * width);
  return out;
}

class MoeKernelsTest : public GpuTest {
 protected:
  // Device copies of a case's inputs and buffers for every stage's output.
  struct Device {
    cuda::DeviceBuffer x, logits, bias, tid2eid, token_ids, shared;
    cuda::DeviceBuffer w1, w1s, w3, w3s, w2, w2s;
    cuda::DeviceBuffer ids, weights, offsets, sorted, h, y, out;
  };

  cuda::DeviceBuffer UploadBytesOrEmpty(const std::vector<uint8_t>& v) {
    return v.empty() ? cuda::DeviceBuffer{} : UploadBytes(v.data(), v.size());
  }

  Device UploadCase(const MoeCase& c, const Inputs& in) {
    Device d;
    d.x = Upload(ToBF16(in.x));
    d.logits = Upload(in.logits);
    d.bias = Upload(in.bias);
    d.tid2eid = Upload(in.tid2eid);
    d.token_ids = Upload(in.token_ids);
    d.shared = Upload(ToBF16(in.shared));
    d.w1 = UploadBytesOrEmpty(in.w1.weight);
    d.w1s = UploadBytesOrEmpty(in.w1.scale);
    d.w3 = UploadBytesOrEmpty(in.w3.weight);
    d.w3s = UploadBytesOrEmpty(in.w3.scale);
    d.w2 = UploadBytesOrEmpty(in.w2.weight);
    d.w2s = UploadBytesOrEmpty(in.w2.scale);
    const size_t nk = static_cast<size_t>(c.n * c.k);
    d.ids = Poisoned(nk * 4, 0xab);
    d.weights = Poisoned(nk * 4);
    d.offsets = Poisoned(static_cast<size_t>(c.e + 1) * 4, 0xab);
    d.sorted = Poisoned(nk * 4, 0xab);
    d.h = Poisoned(nk * static_cast<size_t>(c.i) * 2);
    d.y = Poisoned(nk * static_cast<size_t>(c.d) * 4);
    d.out = Poisoned(static_cast<size_t>(c.n * c.d) * 2);
    return d;
  }

  cuda::MoeExpertMatrix MatrixView(const MoeCase& c, const cuda::DeviceBuffer& w, const cuda::DeviceBuffer& s,
                                   int64_t rows, int64_t cols) {
    cuda::MoeExpertMatrix m;
    if (c.format == MoeWeightFormat::kBF16) {
      m.weight = View(w, DType::kBF16, {c.e, rows, cols});
    } else {
      m.weight = View(w, DType::kU8, {c.e, rows, cols / 2});
      m.scale = View(s, DType::kUE8M0, {c.e, rows, cols / 32});
    }
    return m;
  }

  // The routed experts' weight buffers a chain reads (a whole case's, or one rank's part).
  struct ExpertWeights {
    const cuda::DeviceBuffer &w1, &w1s, &w3, &w3s, &w2, &w2s;
  };

  // The five launches, in the order the model runner issues them.
  Status Enqueue(const MoeCase& c, const Device& d) {
    return EnqueueExperts(c, d, 0, static_cast<int>(c.e), {d.w1, d.w1s, d.w3, d.w3s, d.w2, d.w2s});
  }

  // The same as one expert-parallel rank runs them: routing over all c.e experts, then align,
  // gate-up, down and combine over its `count` experts from `begin` (`w` holds only those),
  // every other assignment -1. begin 0 and count c.e is the whole chain.
  Status EnqueueExperts(const MoeCase& c, const Device& d, int begin, int count, const ExpertWeights& w) {
    MoeCase local = c;
    local.e = count;
    const int64_t nk = c.n * c.k;
    cuda::MoeRouteArgs route;
    route.logits = View(d.logits, DType::kF32, {c.n, c.e});
    if (c.hash) {
      route.tid2eid = View(d.tid2eid, DType::kI32, {static_cast<int64_t>(97), c.k});
      route.token_ids = View(d.token_ids, DType::kI32, {c.n});
    } else {
      route.bias = View(d.bias, DType::kF32, {c.e});
    }
    route.topk_ids = View(d.ids, DType::kI32, {c.n, c.k});
    route.topk_weights = View(d.weights, DType::kF32, {c.n, c.k});
    route.routed_scaling_factor = 1.5f;
    route.local_begin = begin;
    route.local_count = count;
    cuda::MoeAlignArgs align;
    align.topk_ids = route.topk_ids;
    align.expert_offsets = View(d.offsets, DType::kI32, {count + 1});
    align.sorted_assignments = View(d.sorted, DType::kI32, {nk});
    PG_RETURN_IF_ERROR(cuda::MoeRouteAndAlign(route, align, stream_.get()));

    cuda::MoeGateUpArgs gate_up;
    gate_up.x = View(d.x, DType::kBF16, {c.n, c.d});
    gate_up.sorted_assignments = align.sorted_assignments;
    gate_up.expert_offsets = align.expert_offsets;
    gate_up.format = c.format;
    gate_up.w1 = MatrixView(local, w.w1, w.w1s, c.i, c.d);
    gate_up.w3 = MatrixView(local, w.w3, w.w3s, c.i, c.d);
    gate_up.h = View(d.h, DType::kBF16, {nk, c.i});
    gate_up.swiglu_limit = c.limit;
    gate_up.num_ctas = c.num_ctas;
    gate_up.mxfp4_kernel = c.kernel;
    PG_RETURN_IF_ERROR(cuda::MoeGateUp(gate_up, stream_.get()));

    cuda::MoeDownArgs down;
    down.h = gate_up.h;
    down.sorted_assignments = align.sorted_assignments;
    down.expert_offsets = align.expert_offsets;
    down.format = c.format;
    down.w2 = MatrixView(local, w.w2, w.w2s, c.d, c.i);
    down.y = View(d.y, DType::kF32, {nk, c.d});
    down.num_ctas = c.num_ctas;
    down.mxfp4_kernel = c.kernel;
    PG_RETURN_IF_ERROR(cuda::MoeDown(down, stream_.get()));

    cuda::MoeCombineArgs combine;
    combine.y = down.y;
    combine.topk_ids = route.topk_ids;
    combine.topk_weights = route.topk_weights;
    if (c.shared) combine.shared = View(d.shared, DType::kBF16, {c.n, c.d});
    combine.out = View(d.out, DType::kBF16, {c.n, c.d});
    return cuda::MoeCombine(combine, stream_.get());
  }

  // Checks every stage's device output against the CPU reference fed the device's input.
  void CheckStages(const MoeCase& c, const Inputs& in, const Device& d) {
    const int64_t nk = c.n * c.k;
    const Routing want =
        RouteRef(in.logits, c.hash ? nullptr : &in.bias, &in.tid2eid, &in.token_ids, c.n, c.e, c.k, 1.5f);
    const auto ids = Download<int32_t>(d.ids, static_cast<size_t>(nk));
    const auto weights = Download<float>(d.weights, static_cast<size_t>(nk));
    for (int64_t a = 0; a < nk; ++a) {
      ASSERT_EQ(ids[a], want.ids[a]) << "topk_ids at token " << a / c.k << ", k " << a % c.k;
    }
    ASSERT_TRUE(AllClose(weights, want.weights, {0.0, 1e-6}, "topk_weights"));

    std::vector<int32_t> offsets_want, sorted_want;
    AlignRef(ids, c.e, offsets_want, sorted_want);
    const auto offsets = Download<int32_t>(d.offsets, static_cast<size_t>(c.e + 1));
    const auto sorted = Download<int32_t>(d.sorted, static_cast<size_t>(nk));
    ASSERT_EQ(offsets, offsets_want) << "expert_offsets";
    ASSERT_EQ(std::vector<int32_t>(sorted.begin(), sorted.begin() + offsets.back()), sorted_want)
        << "sorted_assignments";

    // Gate-up from x and the weights' values.
    std::vector<float> h_want(static_cast<size_t>(nk * c.i), 0.0f);
    for (int64_t a = 0; a < nk; ++a) {
      if (ids[a] < 0) continue;
      const float* x = in.x.data() + (a / c.k) * c.d;
      for (int64_t r = 0; r < c.i; ++r) {
        const int64_t row = (ids[a] * c.i + r) * c.d;
        const float g = static_cast<float>(Dot(x, in.w1.values.data() + row, c.d));
        const float u = static_cast<float>(Dot(x, in.w3.values.data() + row, c.d));
        h_want[a * c.i + r] = SwiGlu(g, u, c.limit);
      }
    }
    const std::vector<float> h = DownloadBF16(d.h, static_cast<size_t>(nk * c.i));
    ASSERT_TRUE(AllClose(ValidRows(h, ids, c.i), ValidRows(h_want, ids, c.i), ToleranceFor(DType::kBF16), "h"));

    // Down from the device's h (so this stage is checked to f32 precision).
    std::vector<float> y_want(static_cast<size_t>(nk * c.d), 0.0f);
    for (int64_t a = 0; a < nk; ++a) {
      if (ids[a] < 0) continue;
      for (int64_t j = 0; j < c.d; ++j)
        y_want[a * c.d + j] = static_cast<float>(
            Dot(h.data() + a * c.i, in.w2.values.data() + (ids[a] * c.d + j) * c.i, c.i));
    }
    const std::vector<float> y = Download<float>(d.y, static_cast<size_t>(nk * c.d));
    ASSERT_TRUE(AllClose(ValidRows(y, ids, c.d), ValidRows(y_want, ids, c.d), ToleranceFor(DType::kF32), "y"));

    // Combine from the device's y and weights.
    std::vector<float> out_want(static_cast<size_t>(c.n * c.d));
    for (int64_t t = 0; t < c.n; ++t) {
      for (int64_t j = 0; j < c.d; ++j) {
        float acc = 0.0f;
        for (int64_t k = 0; k < c.k; ++k) {
          const int64_t a = t * c.k + k;
          if (ids[a] >= 0) acc += weights[a] * y[a * c.d + j];
        }
        out_want[t * c.d + j] = acc + (c.shared ? in.shared[t * c.d + j] : 0.0f);
      }
    }
    const std::vector<float> out = DownloadBF16(d.out, static_cast<size_t>(c.n * c.d));
    ASSERT_TRUE(AllClose(out, out_want, ToleranceFor(DType::kBF16), "out"));
  }

  void Run(const MoeCase& c, uint32_t seed) {
    SCOPED_TRACE(Name(c));
    const Inputs in = MakeInputs(c, seed);
    const Device d = UploadCase(c, in);
    PG_ASSERT_OK(Enqueue(c, d));
    Sync();
    CheckStages(c, in, d);
  }

  // MXFP4 cases (N, E, D, I) with K = 2 on each grid size (0: one full wave), the clamp on
  // every other case, a hot expert where N = 20, on the given kernel.
  void RunMxfp4Cases(std::initializer_list<std::array<int64_t, 4>> shapes, std::initializer_list<int> grids,
                     uint32_t seed, MoeMxfp4Kernel kernel = MoeMxfp4Kernel::kAuto) {
    for (const auto& [n, e, d, i] : shapes)
      for (int num_ctas : grids) {
        MoeCase c{n, e, 2, d, i};
        c.format = MoeWeightFormat::kMxfp4;
        c.kernel = kernel;
        c.limit = seed % 2 == 0 ? 0.0f : 3.0f;
        c.hot_expert = n == 20;
        c.num_ctas = num_ctas;
        Run(c, seed++);
      }
  }
};

TEST_F(MoeKernelsTest, SmallShapeSweep) {
  uint32_t seed = 1;
  for (MoeWeightFormat format : {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4})
    for (bool hash : {false, true})
      for (int64_t e : {8, 256})
        for (int64_t k : {1, 2, 6})
          for (int64_t n : {1, 3, 17, 64, 300}) {
            MoeCase c{n, e, k, 64, 32};
            c.hash = hash;
            c.format = format;
            c.limit = seed % 2 == 0 ? 0.0f : 1.5f;  // the clamp engages: |g|, |u| reach a few
            c.shared = seed % 3 != 0;
            Run(c, seed++);
          }
}

TEST_F(MoeKernelsTest, AwkwardWidths) {
  // Widths that leave lanes idle or loop more than once per lane, and token groups of 1..4+.
  uint32_t seed = 500;
  for (MoeWeightFormat format : {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4})
    for (auto [d, i] : {std::pair<int64_t, int64_t>{96, 160}, {1056, 288}, {288, 1056}, {2080, 64}}) {
      MoeCase c{17, 8, 2, d, i};
      c.format = format;
      c.limit = 2.0f;
      Run(c, seed++);
    }
}

TEST_F(MoeKernelsTest, Mxfp4TensorCoreTiling) {
  // The MXFP4 tensor-core kernel: experts with more than one pass of 16 assignments (and a
  // partial 8-assignment tile), 128-input steps with a partial last step (in_dim 160, 416:
  // only some lanes' 32-input blocks exist), 9-step rows, and a one-CTA grid whose warps loop
  // over every work item.
  RunMxfp4Cases({{64, 4, 256, 160}, {5, 2, 1152, 416}, {41, 3, 128, 32}}, {0, 1}, 600);
}

TEST_F(MoeKernelsTest, Mxfp4SplitK) {
  // The MXFP4 tensor-core kernel's split-K path (2 or 4 warps per item when items are few for
  // the grid): step counts that the split does not divide (in_dim 1120: 9 steps, the last
  // partial: 4 + 5 with a split of 2, e.g. 8 items on a one-CTA grid, 2 + 2 + 2 + 3 with 4;
  // 416: 4 steps, the last partial; 160: 2 steps, at most a split of 2), one assignment per
  // touched expert (N = 1, K = 2) and untouched experts, a hot expert with several one-tile
  // passes (N = 20), and grids of all, 1 and 2 CTAs (which change the split chosen, including
  // none).
  RunMxfp4Cases({{1, 8, 1120, 64}, {1, 8, 64, 1120}, {1, 64, 416, 1120}, {3, 8, 160, 1120}, {20, 8, 1120, 160}},
                {0, 1, 2}, 650);
}

TEST_F(MoeKernelsTest, Mxfp4WholeStages) {
  // The MXFP4 tensor-core kernel's whole-stage form (in_dim a multiple of 256: rows stream two
  // steps at a time with their scales): one and several stages per item, warps walking
  // several items and passes (a one- or two-CTA grid, a hot expert), the next item's first
  // stage prefetched across the boundary, and the split path (N = 1: few items) whose ranks
  // take whole stages, for gate-up and down.
  RunMxfp4Cases({{64, 4, 512, 1024}, {20, 8, 768, 512}, {1, 8, 1024, 2048}, {2, 16, 256, 512}}, {0, 1, 2},
                680);
}

TEST_F(MoeKernelsTest, Mxfp4CudaCoreKernel) {
  // The CUDA-core MXFP4 kernel (devices without the tensor-core kernel's shared memory), forced
  // here: one assignment per touched expert (N = 1), groups of 2..4 and more than one group per
  // expert (N = 5, 20: a hot expert), rows whose 32-input blocks leave lanes idle or loop
  // (in_dim 160, 1120, 4096), and one- and two-CTA grids whose warps walk many items.
  RunMxfp4Cases({{1, 8, 1120, 160}, {1, 16, 4096, 2048}, {5, 4, 160, 1120}, {20, 8, 288, 1056}}, {0, 1, 2}, 720,
                MoeMxfp4Kernel::kCudaCore);
}

TEST_F(MoeKernelsTest, Mxfp4BatchInvariantModeKeepsEachAssignmentsBits) {
  // --enable-deterministic-inference: one token's h and y rows must not depend on what else
  // is in the batch. Alone, the token touches 6 of 16 experts, few enough items for the
  // MXFP4 kernel to split their inputs over warps (a different order of every sum); in a
  // batch of 40 every expert is touched and nothing splits. With batch_invariant neither
  // splits, so the bits must match. V4-Flash widths (whole stages); no CPU reference (the
  // other tests hold the values to it).
  constexpr int64_t e = 16, k = 6, d = 4096, i = 2048, n = 40, row = 7;
  uint64_t state = 4242;
  auto bytes = [&](size_t count, int base, int spread) {
    std::vector<uint8_t> v(count);
    for (uint8_t& b : v) b = static_cast<uint8_t>(base + static_cast<int>(NextRandom(state) % static_cast<uint32_t>(spread)));
    return v;
  };
  const auto w1 = Upload(bytes(e * i * d / 2, 0, 256)), w3 = Upload(bytes(e * i * d / 2, 0, 256));
  const auto w2 = Upload(bytes(e * d * i / 2, 0, 256));
  const auto s1 = Upload(bytes(e * i * d / 32, 117, 5)), s3 = Upload(bytes(e * i * d / 32, 117, 5));
  const auto s2 = Upload(bytes(e * d * i / 32, 119, 5));
  std::mt19937 rng(7);
  const std::vector<float> x = RoundedBF16(RandomNormal(rng, static_cast<size_t>(n * d)));
  std::vector<int32_t> ids(static_cast<size_t>(n * k));
  std::vector<int32_t> experts(e);
  std::iota(experts.begin(), experts.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(experts.begin(), experts.end(), rng);
    std::copy_n(experts.begin(), k, ids.begin() + t * k);
  }

  auto expect_ok = [](const Status& status) { EXPECT_TRUE(status.ok()) << status.ToString(); };
  // h and y rows of token `token`'s assignments after running the batch x[rows] with ids[rows].
  auto run = [&](int64_t first, int64_t count, int64_t token) {
    const int64_t nk = count * k;
    const auto dx = Upload(ToBF16(std::span<const float>(x).subspan(static_cast<size_t>(first * d),
                                                                    static_cast<size_t>(count * d))));
    const auto dids = Upload(std::vector<int32_t>(ids.begin() + first * k, ids.begin() + (first + count) * k));
    const auto offsets = Poisoned(static_cast<size_t>(e + 1) * 4), sorted = Poisoned(static_cast<size_t>(nk) * 4);
    const auto h = Poisoned(static_cast<size_t>(nk * i) * 2), y = Poisoned(static_cast<size_t>(nk * d) * 4);
    cuda::MoeAlignArgs align;
    align.topk_ids = View(dids, DType::kI32, {count, k});
    align.expert_offsets = View(offsets, DType::kI32, {e + 1});
    align.sorted_assignments = View(sorted, DType::kI32, {nk});
    expect_ok(cuda::MoeAlign(align, stream_.get()));
    cuda::MoeGateUpArgs gate_up;
    gate_up.x = View(dx, DType::kBF16, {count, d});
    gate_up.sorted_assignments = align.sorted_assignments;
    gate_up.expert_offsets = align.expert_offsets;
    gate_up.format = MoeWeightFormat::kMxfp4;
    gate_up.w1 = {View(w1, DType::kU8, {e, i, d / 2}), View(s1, DType::kU8, {e, i, d / 32})};
    gate_up.w3 = {View(w3, DType::kU8, {e, i, d / 2}), View(s3, DType::kU8, {e, i, d / 32})};
    gate_up.h = View(h, DType::kBF16, {nk, i});
    gate_up.swiglu_limit = 10.0f;
    gate_up.batch_invariant = true;
    expect_ok(cuda::MoeGateUp(gate_up, stream_.get()));
    cuda::MoeDownArgs down;
    down.h = gate_up.h;
    down.sorted_assignments = align.sorted_assignments;
    down.expert_offsets = align.expert_offsets;
    down.format = MoeWeightFormat::kMxfp4;
    down.w2 = {View(w2, DType::kU8, {e, d, i / 2}), View(s2, DType::kU8, {e, d, i / 32})};
    down.y = View(y, DType::kF32, {nk, d});
    down.batch_invariant = true;
    expect_ok(cuda::MoeDown(down, stream_.get()));
    Sync();
    const std::vector<uint16_t> h_all = Download<uint16_t>(h, static_cast<size_t>(nk * i));
    const std::vector<uint32_t> y_all = Download<uint32_t>(y, static_cast<size_t>(nk * d));
    return std::pair(std::vector<uint16_t>(h_all.begin() + token * k * i, h_all.begin() + (token + 1) * k * i),
                     std::vector<uint32_t>(y_all.begin() + token * k * d, y_all.begin() + (token + 1) * k * d));
  };
  const auto [h_alone, y_alone] = run(row, 1, 0);
  const auto [h_batched, y_batched] = run(0, n, row);
  EXPECT_TRUE(h_alone == h_batched) << "h of the token alone and in the batch differ";
  EXPECT_TRUE(y_alone == y_batched) << "y of the token alone and in the batch differ";
}

TEST_F(MoeKernelsTest, FlashShapes) {
  // V4-Flash widths with few experts (the CPU reference is the cost).
  uint32_t seed = 700;
  for (MoeWeightFormat format : {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4}) {
    MoeCase c{3, 4, 2, 4096, 2048};
    c.format = format;
    c.limit = 10.0f;
    Run(c, seed++);
  }
}

TEST_F(MoeKernelsTest, TiesAndHotExpert) {
  uint32_t seed = 900;
  for (MoeWeightFormat format : {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4})
    for (int64_t e : {8, 256})
      for (int64_t n : {1, 17, 300}) {
        MoeCase ties{n, e, 6, 64, 64};
        ties.ties = true;
        ties.format = format;
        Run(ties, seed++);
        MoeCase hot{n, e, 6, 64, 64};  // every token's group for that expert: up to 300 assignments
        hot.hot_expert = true;
        hot.format = format;
        Run(hot, seed++);
        hot.hash = true;
        Run(hot, seed++);
      }
}

// End to end against the model's CPU MoE (weights rounded to bf16 or dequantised MXFP4, the
// gate GEMM and the shared expert computed on the host as the model does).
TEST_F(MoeKernelsTest, MatchesModelMoe) {
  for (MoeWeightFormat format : {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4})
    for (bool hash : {false, true}) {
      MoeCase c{17, 16, 4, 128, 64};
      c.format = format;
      c.hash = hash;
      c.limit = 2.0f;
      SCOPED_TRACE(Name(c));
      std::mt19937 rng(1234 + static_cast<int>(hash) + 2 * static_cast<int>(format));
      Inputs in = MakeInputs(c, 77 + static_cast<uint32_t>(hash));
      in.token_ids[2] = 5;  // the model has no out-of-range tokens

      ModelConfig config;
      config.hidden_size = c.d;
      config.num_experts = c.e;
      config.num_experts_per_tok = c.k;
      config.moe_intermediate_size = c.i;
      config.routed_scaling_factor = 1.5;
      config.swiglu_limit = c.limit;
      auto host = [](std::vector<float> v, Shape shape) {
        auto storage = std::make_shared<std::vector<float>>(std::move(v));
        HostTensor t;
        t.view = Tensor::Contiguous(storage->data(), DType::kF32, shape);
        t.storage = storage;
        return t;
      };
      deepseek_v4::MoeWeights w;
      const std::vector<float> gate = RandomNormal(rng, static_cast<size_t>(c.e * c.d), 0.2f);
      w.gate = host(gate, {c.e, c.d});
      w.bias = host(in.bias, {c.e});
      {
        auto storage = std::make_shared<std::vector<int64_t>>(in.tid2eid.begin(), in.tid2eid.end());
        w.tid2eid.view = Tensor::Contiguous(storage->data(), DType::kI64, {97, c.k});
        w.tid2eid.storage = storage;
      }
      auto slice = [&](const Matrix& m, int64_t e, int64_t rows, int64_t cols) {
        const auto* begin = m.values.data() + e * rows * cols;
        return host(std::vector<float>(begin, begin + rows * cols), {rows, cols});
      };
      for (int64_t e = 0; e < c.e; ++e)
        w.experts.push_back({slice(in.w1, e, c.i, c.d), slice(in.w2, e, c.d, c.i), slice(in.w3, e, c.i, c.d)});
      const Matrix s1 = MakeMatrix(901, 1, c.i, c.d, MoeWeightFormat::kBF16);
      const Matrix s2 = MakeMatrix(902, 1, c.d, c.i, MoeWeightFormat::kBF16);
      const Matrix s3 = MakeMatrix(903, 1, c.i, c.d, MoeWeightFormat::kBF16);
      w.shared = {slice(s1, 0, c.i, c.d), slice(s2, 0, c.d, c.i), slice(s3, 0, c.i, c.d)};

      cpu::ThreadPool pool(1);
      std::vector<float> want(static_cast<size_t>(c.n * c.d));
      deepseek_v4::Moe(config, pool, w, c.hash ? MoeType::kHash : MoeType::kLearned, in.token_ids, in.x.data(),
                       want.data());

      // What the runner computes around these ops: the gate GEMM and the shared expert.
      in.logits.assign(static_cast<size_t>(c.n * c.e), 0.0f);
      cpu::Linear(pool, in.x.data(), gate.data(), in.logits.data(), c.n, c.d, c.e);
      std::vector<float> g(static_cast<size_t>(c.n * c.i)), u(g.size());
      cpu::Linear(pool, in.x.data(), s1.values.data(), g.data(), c.n, c.d, c.i);
      cpu::Linear(pool, in.x.data(), s3.values.data(), u.data(), c.n, c.d, c.i);
      for (size_t j = 0; j < g.size(); ++j) g[j] = SwiGlu(g[j], u[j], c.limit);
      in.shared.assign(static_cast<size_t>(c.n * c.d), 0.0f);
      cpu::Linear(pool, g.data(), s2.values.data(), in.shared.data(), c.n, c.i, c.d);
      in.shared = RoundedBF16(in.shared);

      const Device d = UploadCase(c, in);
      PG_ASSERT_OK(Enqueue(c, d));
      Sync();
      const std::vector<float> got = DownloadBF16(d.out, static_cast<size_t>(c.n * c.d));
      // bf16 h and the bf16 shared output on the device vs f32 throughout on the host.
      EXPECT_TRUE(AllClose(got, want, {1e-2, 3e-2}, "moe out vs deepseek_v4::Moe"));
    }
}

// The whole chain recorded once; inputs rewritten in place; every replay matches.
TEST_F(MoeKernelsTest, GraphReplayWithNewInputs) {
  // The third case is batch-1-like MXFP4 (the split-K path: few items, 9- and 4-step rows).
  for (int variant : {0, 1, 2}) {
    const bool hash = variant == 1;
    MoeCase c = variant < 2 ? MoeCase{64, 256, 6, 128, 64} : MoeCase{2, 16, 2, 1120, 416};
    c.hash = hash;
    c.format = variant == 0 ? MoeWeightFormat::kBF16 : MoeWeightFormat::kMxfp4;
    c.limit = 2.0f;
    SCOPED_TRACE(Name(c));
    Inputs in = MakeInputs(c, 31);
    const Device d = UploadCase(c, in);
    PG_ASSERT_OK(Enqueue(c, d));  // warm-up outside the capture
    Sync();
    ASSERT_TRUE(cuda::Graph::BeginCapture(stream_.get()).ok());
    const Status enqueued = Enqueue(c, d);
    auto graph = cuda::Graph::EndCapture(stream_.get());
    PG_ASSERT_OK(enqueued);
    ASSERT_TRUE(graph.ok()) << graph.status().ToString();
    std::mt19937 rng(5);
    for (int replay = 0; replay < 3; ++replay) {
      SCOPED_TRACE("replay " + std::to_string(replay));
      in.logits = RandomNormal(rng, in.logits.size(), 1.5f);
      if (replay == 2) std::fill(in.logits.begin(), in.logits.end(), 0.0f);  // all ties
      for (int32_t& t : in.token_ids) t = static_cast<int32_t>(rng() % 97);
      CopyIn(d.logits, in.logits);
      CopyIn(d.token_ids, in.token_ids);
      for (const cuda::DeviceBuffer* b : {&d.ids, &d.weights, &d.offsets, &d.sorted, &d.h, &d.y, &d.out}) Poison(*b);
      PG_ASSERT_OK(graph->Launch(stream_.get()));
      Sync();
      CheckStages(c, in, d);
    }
  }
}

// Expert parallel: routing over all experts, then this rank's range written as local ids
// and every other expert as -1, the weights those of the whole routing.
TEST_F(MoeKernelsTest, RouteKeepsOnlyTheLocalExperts) {
  const int64_t n = 37, e = 16, k = 6;
  std::vector<float> logits(static_cast<size_t>(n * e)), bias(static_cast<size_t>(e));
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>(i % 5);
  const Routing want = RouteRef(logits, &bias, nullptr, nullptr, n, e, k, 1.5f);
  const cuda::DeviceBuffer d_logits = Upload(logits), d_bias = Upload(bias);
  const cuda::DeviceBuffer ids = Poisoned(static_cast<size_t>(n * k) * 4, 0xab);
  const cuda::DeviceBuffer weights = Poisoned(static_cast<size_t>(n * k) * 4);
  for (const auto& [begin, count] : {std::pair<int, int>{0, 4}, {4, 4}, {12, 4}, {0, 16}}) {
    cuda::MoeRouteArgs route;
    route.logits = View(d_logits, DType::kF32, {n, e});
    route.bias = View(d_bias, DType::kF32, {e});
    route.topk_ids = View(ids, DType::kI32, {n, k});
    route.topk_weights = View(weights, DType::kF32, {n, k});
    route.routed_scaling_factor = 1.5f;
    route.local_begin = begin;
    route.local_count = count;
    PG_ASSERT_OK(cuda::MoeRoute(route, stream_.get()));
    Sync();
    const auto got_ids = Download<int32_t>(ids, static_cast<size_t>(n * k));
    const auto got_weights = Download<float>(weights, static_cast<size_t>(n * k));
    for (size_t a = 0; a < got_ids.size(); ++a) {
      const int32_t id = want.ids[a];
      const int32_t local = id >= begin && id < begin + count ? id - begin : -1;
      ASSERT_EQ(got_ids[a], local) << "range " << begin << "+" << count << " assignment " << a;
      EXPECT_NEAR(got_weights[a], want.weights[a], 1e-6f * std::abs(want.weights[a]) + 1e-7f);
    }
  }
  cuda::MoeRouteArgs bad;
  bad.logits = View(d_logits, DType::kF32, {n, e});
  bad.bias = View(d_bias, DType::kF32, {e});
  bad.topk_ids = View(ids, DType::kI32, {n, k});
  bad.topk_weights = View(weights, DType::kF32, {n, k});
  bad.local_begin = 12;
  bad.local_count = 8;
  EXPECT_EQ(cuda::MoeRoute(bad, stream_.get()).code(), StatusCode::kInvalidArgument);
}

// Expert parallel end to end: each rank's chain over its own experts (and the shared
// expert's output on rank 0 only), the ranks' bf16 outputs summed, equals the whole chain up
// to the ranks' extra bf16 rounding; a case shaped like the demo model (8 experts, top 2) and
// one like V4-Flash's routing (256 experts, top 6), learned and hash routing.
TEST_F(MoeKernelsTest, ExpertParallelRanksSumToTheWholeChain) {
  for (const MoeCase& base : {MoeCase{17, 8, 2, 128, 128}, MoeCase{40, 256, 6, 128, 64}})
    for (MoeWeightFormat format : {MoeWeightFormat::kBF16, MoeWeightFormat::kMxfp4})
      for (bool hash : {false, true}) {
        MoeCase c = base;
        c.format = format;
        c.hash = hash;
        c.limit = 2.0f;
        SCOPED_TRACE(Name(c));
        const Inputs in = MakeInputs(c, 501 + static_cast<uint32_t>(hash));
        const Device d = UploadCase(c, in);
        PG_ASSERT_OK(Enqueue(c, d));
        Sync();
        const std::vector<float> whole = DownloadBF16(d.out, static_cast<size_t>(c.n * c.d));
        for (int ranks : {2, 4}) {
          SCOPED_TRACE(std::to_string(ranks) + " ranks");
          std::vector<float> sum(whole.size(), 0.0f);
          const int count = static_cast<int>(c.e) / ranks;
          for (int r = 0; r < ranks; ++r) {
            // This rank's experts' bytes (expert-major tensors).
            auto part = [&](const std::vector<uint8_t>& all) {
              if (all.empty()) return cuda::DeviceBuffer{};
              const size_t per = all.size() / static_cast<size_t>(c.e);
              return UploadBytes(all.data() + per * static_cast<size_t>(r * count), per * static_cast<size_t>(count));
            };
            const cuda::DeviceBuffer w1 = part(in.w1.weight), w1s = part(in.w1.scale), w3 = part(in.w3.weight),
                                     w3s = part(in.w3.scale), w2 = part(in.w2.weight), w2s = part(in.w2.scale);
            MoeCase rc = c;
            rc.shared = r == 0;
            for (const cuda::DeviceBuffer* b : {&d.ids, &d.weights, &d.offsets, &d.sorted, &d.h, &d.y, &d.out}) Poison(*b);
            PG_ASSERT_OK(EnqueueExperts(rc, d, r * count, count, {w1, w1s, w3, w3s, w2, w2s}));
            Sync();
            const std::vector<float> got = DownloadBF16(d.out, whole.size());
            for (size_t j = 0; j < sum.size(); ++j) sum[j] += got[j];
          }
          EXPECT_TRUE(AllClose(RoundedBF16(sum), whole, {2e-2, 2e-2}, "sum over EP ranks vs the whole chain"));
        }
      }
}

}  // namespace
}  // namespace peregrine::testing
