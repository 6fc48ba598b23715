#include "kernels/hyper_connection.cuh"

#include <array>
#include <cuda_bf16.h>

#include "kernels/common/dependent_launch.cuh"
#include "kernels/common/moe_combine.cuh"
#include "kernels/common/warp.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kMaxMixes = (2 + kHcMaxMult) * kHcMaxMult;

// ---- Mixes GEMM -------------------------------------------------------------------------
// A CTA owns 32 tokens x all mixes x one split of k, staged through shared memory 64 k at a
// time (the global loads of stage s + 1 are in flight while stage s is multiplied). Thread
// (tg, mg, ks) accumulates tokens 4 tg .. 4 tg + 3 times mixes kB mg .. kB mg + kB - 1 over the
// float4 columns ks and ks + 8 of each stage; the 8 ks of an output are adjacent lanes, reduced
// by three shuffles at the end.
constexpr int kStageK = 64;
constexpr int kStageVecs = kStageK / 4;  // float4 per row of a stage
constexpr int kTokensPerThread = 4;
constexpr int kMixGroups = 4;
constexpr int kSlices = 8;
static_assert(kHcTokenTile == kTokensPerThread * (kThreads / (kMixGroups * kSlices)));
static_assert(kHcSplitUnit % kStageK == 0);
static_assert(kThreads / (kSlices * kMixGroups) * kWarpSize == kThreads);  // tg == warp
static_assert(kStageVecs == 2 * kSlices);
static_assert(kHcTokenTile * kStageVecs == 2 * kThreads);

// Mixes per thread group: the compile-time widths the GEMM is built for; a call takes the
// first with 4 * width >= M (padding mixes are zero rows of the stage).
constexpr std::array<int, 8> kMixWidths = {1, 2, 4, 6, 9, 12, 16, 20};
static_assert(kMixGroups * kMixWidths.back() >= kMaxMixes);

__device__ __forceinline__ float4 Zero4() { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }

__device__ __forceinline__ float Dot4(const float4 a, const float4 b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

// Index of value v (a mix, or M for the sum of squares) of token t, split s in the workspace
// [N, M + 1, num_splits]: a token's splits are adjacent so the finalize reads them coalesced.
__device__ __forceinline__ int64_t WorkspaceIndex(int64_t t, int v, int64_t s, int num_values, int64_t num_splits) {
  return (t * num_values + v) * num_splits + s;
}

// The stream row a token reads, or -1 when its index is outside the streams.
__device__ __forceinline__ int64_t StreamRow(const HcCollapseParams& p, int64_t t) {
  const int64_t row = p.rows != nullptr ? static_cast<int64_t>(p.rows[t]) : t;
  return row >= 0 && row < p.num_stream_rows ? row : -1;
}

template <int kB>
__global__ void __launch_bounds__(kThreads)
    HcMixesKernel(const HcCollapseParams p, int num_mixes, int64_t num_splits, int64_t units_per_split) {
  constexpr int kMixPad = kMixGroups * kB;
  constexpr int kBVecs = kMixPad * kStageVecs;
  constexpr int kBLoads = (kBVecs + kThreads - 1) / kThreads;
  __shared__ float4 a_s[kHcTokenTile * kStageVecs];  // [32 tokens][16 float4]
  __shared__ float4 b_s[kBVecs];                     // [kMixPad mixes][16 float4]

  WaitForPredecessor();
  AllowDependents();
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t k_total = static_cast<int64_t>(p.hc) * p.dim;
  const int64_t split = blockIdx.x;
  const int64_t k_begin = split * units_per_split * kHcSplitUnit;
  const int64_t k_end = min(k_begin + units_per_split * kHcSplitUnit, k_total);
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kHcTokenTile;

  // Loader roles: float4 tid + 256 r of the A stage is token tid / 16 + 16 r, column tid % 16;
  // float4 tid + 256 r of the B stage is mix (tid + 256 r) / 16, same column.
  const int col = (tid % kStageVecs) * 4;
  const float* a_src[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t t = t0 + tid / kStageVecs + r * (kThreads / kStageVecs);
    const int64_t row = t < p.num_tokens ? StreamRow(p, t) : -1;
    a_src[r] = row >= 0 ? p.streams + row * k_total + col : nullptr;
  }
  const float* b_src[kBLoads];
#pragma unroll
  for (int r = 0; r < kBLoads; ++r) {
    const int idx = tid + r * kThreads;
    const int m = idx / kStageVecs;
    b_src[r] = idx < kBVecs && m < num_mixes ? p.fn + m * k_total + col : nullptr;
  }

  float4 a_next[2];
  float4 b_next[kBLoads];
  auto load = [&](int64_t k0) {
    const bool in_range = k0 + col < k_end;  // k_end is a multiple of 4: a float4 is all in or out
#pragma unroll
    for (int r = 0; r < 2; ++r)
      a_next[r] = a_src[r] != nullptr && in_range ? __ldg(reinterpret_cast<const float4*>(a_src[r] + k0)) : Zero4();
#pragma unroll
    for (int r = 0; r < kBLoads; ++r)
      b_next[r] = b_src[r] != nullptr && in_range ? __ldg(reinterpret_cast<const float4*>(b_src[r] + k0)) : Zero4();
  };

  const int ks = tid % kSlices;
  const int mg = (tid / kSlices) % kMixGroups;
  const int tg = tid / (kSlices * kMixGroups);
  float acc[kTokensPerThread][kB];
#pragma unroll
  for (int i = 0; i < kTokensPerThread; ++i)
#pragma unroll
    for (int j = 0; j < kB; ++j) acc[i][j] = 0.0f;
  float ss[2] = {0.0f, 0.0f};

  load(k_begin);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kStageK) {
    __syncthreads();  // the previous stage has been read
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      a_s[tid + r * kThreads] = a_next[r];
      ss[r] = Dot4(a_next[r], a_next[r], ss[r]);
    }
#pragma unroll
    for (int r = 0; r < kBLoads; ++r)
      if (tid + r * kThreads < kBVecs) b_s[tid + r * kThreads] = b_next[r];
    __syncthreads();
    if (k0 + kStageK < k_end) load(k0 + kStageK);
    // Token groups past N (warp-uniform: tg is the warp) only help load and stage.
    if (t0 + tg * kTokensPerThread >= p.num_tokens) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int c = ks + half * kSlices;
      float4 av[kTokensPerThread];
#pragma unroll
      for (int i = 0; i < kTokensPerThread; ++i) av[i] = a_s[(tg * kTokensPerThread + i) * kStageVecs + c];
#pragma unroll
      for (int j = 0; j < kB; ++j) {
        const float4 bv = b_s[(mg * kB + j) * kStageVecs + c];
#pragma unroll
        for (int i = 0; i < kTokensPerThread; ++i) acc[i][j] = Dot4(av[i], bv, acc[i][j]);
      }
    }
  }

  const int num_values = num_mixes + 1;
#pragma unroll
  for (int i = 0; i < kTokensPerThread; ++i) {
#pragma unroll
    for (int j = 0; j < kB; ++j) {
      float v = acc[i][j];
#pragma unroll
      for (int offset = 1; offset < kSlices; offset <<= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
      const int64_t t = t0 + tg * kTokensPerThread + i;
      const int m = mg * kB + j;
      if (ks == 0 && t < p.num_tokens && m < num_mixes)
        p.workspace[WorkspaceIndex(t, m, split, num_values, num_splits)] = v;
    }
  }
  // The 16 lanes that loaded a token's columns hold its sum of squares.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float v = ss[r];
#pragma unroll
    for (int offset = 1; offset < kStageVecs; offset <<= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    const int64_t t = t0 + tid / kStageVecs + r * (kThreads / kStageVecs);
    if (tid % kStageVecs == 0 && t < p.num_tokens)
      p.workspace[WorkspaceIndex(t, num_mixes, split, num_values, num_splits)] = v;
  }
}

// ---- Finalize ---------------------------------------------------------------------------
// blockIdx.x = token; blockIdx.y = 0: weights + pre-weighted sum + RMSNorm; 1: post + Sinkhorn.
constexpr int kVecsPerThread = kHcMaxDim / 4 / kThreads;
constexpr int kSplitBatch = 8;
constexpr int kPrefetchVecs = 4;
static_assert(kPrefetchVecs <= kVecsPerThread);

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <int kN>
__device__ __forceinline__ float PairSum(const float* v) {
  if constexpr (kN == 1) {
    return v[0];
  } else {
    return PairSum<kN / 2>(v) + PairSum<kN - kN / 2>(v + kN / 2);
  }
}

__device__ __forceinline__ float FastReciprocal(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

template <int kHc>
__device__ void Sinkhorn(const HcCollapseParams& p, const float* mix, float prescale, int64_t t) {
  const float eps = p.hc_eps;
  float* post = p.post + t * kHc;
#pragma unroll
  for (int i = 0; i < kHc; ++i) post[i] = 2.0f * Sigmoid(mix[kHc + i] * prescale * p.scale[1] + p.base[kHc + i]);

  // Row softmax + eps, a column normalisation, then (iters - 1) row/column rounds.
  float c[kHc][kHc];
#pragma unroll
  for (int i = 0; i < kHc; ++i) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kHc; ++j) {
      const int m = 2 * kHc + i * kHc + j;
      c[i][j] = mix[m] * prescale * p.scale[2] + p.base[m];
      mx = fmaxf(mx, c[i][j]);
    }
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kHc; ++j) sum += (c[i][j] = expf(c[i][j] - mx));
#pragma unroll
    for (int j = 0; j < kHc; ++j) c[i][j] = c[i][j] / sum + eps;
  }
  // The 20-iteration chain is the latency of this CTA: sums as trees, one approximate
  // reciprocal (MUFU, ~1 ulp) per row or column instead of a divide per element. The
  // result differs from the CPU's sequential sums and divides by a few ulp.
  auto normalise_columns = [&] {
#pragma unroll
    for (int j = 0; j < kHc; ++j) {
      float col[kHc];
#pragma unroll
      for (int i = 0; i < kHc; ++i) col[i] = c[i][j];
      const float inv = FastReciprocal(PairSum<kHc>(col) + eps);
#pragma unroll
      for (int i = 0; i < kHc; ++i) c[i][j] *= inv;
    }
  };
  auto normalise_rows = [&] {
#pragma unroll
    for (int i = 0; i < kHc; ++i) {
      const float inv = FastReciprocal(PairSum<kHc>(c[i]) + eps);
#pragma unroll
      for (int j = 0; j < kHc; ++j) c[i][j] *= inv;
    }
  };
  normalise_columns();
  for (int it = 1; it < p.sinkhorn_iters; ++it) {
    normalise_rows();
    normalise_columns();
  }
  float* comb = p.comb + t * kHc * kHc;
#pragma unroll
  for (int i = 0; i < kHc; ++i)
#pragma unroll
    for (int j = 0; j < kHc; ++j) comb[i * kHc + j] = c[i][j];
}

// The same with one lane per entry of comb (hc * hc <= 32): row and column sums by shuffles,
// so the 20-iteration chain runs hc times fewer instructions. Called by a whole warp.
template <int kHc>
__device__ void SinkhornWarp(const HcCollapseParams& p, const float* mix, float prescale, int64_t t, int lane) {
  static_assert(kHc * kHc <= kWarpSize);
  const float eps = p.hc_eps;
  const bool is_entry = lane < kHc * kHc;
  const int i = lane / kHc, j = lane % kHc;  // lanes past hc * hc compute unused values
  if (lane < kHc)
    p.post[t * kHc + lane] = 2.0f * Sigmoid(mix[kHc + lane] * prescale * p.scale[1] + p.base[kHc + lane]);
  const int m = 2 * kHc + (is_entry ? lane : 0);
  float v = mix[m] * prescale * p.scale[2] + p.base[m];
  auto row_sum = [&](float x) {
    float sum = 0.0f;
#pragma unroll
    for (int jj = 0; jj < kHc; ++jj) sum += __shfl_sync(0xffffffffu, x, i * kHc + jj);
    return sum;
  };
  auto column_sum = [&](float x) {
    float sum = 0.0f;
#pragma unroll
    for (int ii = 0; ii < kHc; ++ii) sum += __shfl_sync(0xffffffffu, x, ii * kHc + j);
    return sum;
  };
  float mx = -INFINITY;
#pragma unroll
  for (int jj = 0; jj < kHc; ++jj) mx = fmaxf(mx, __shfl_sync(0xffffffffu, v, i * kHc + jj));
  v = expf(v - mx);
  v = v / row_sum(v) + eps;
  v *= FastReciprocal(column_sum(v) + eps);
  for (int it = 1; it < p.sinkhorn_iters; ++it) {
    v *= FastReciprocal(row_sum(v) + eps);
    v *= FastReciprocal(column_sum(v) + eps);
  }
  if (is_entry) p.comb[t * kHc * kHc + lane] = v;
}

template <int kHc>
__global__ void __launch_bounds__(kThreads)
    HcFinalizeKernel(const HcCollapseParams p, int num_mixes, int64_t num_splits) {
  __shared__ float mix[kMaxMixes + 1];
  __shared__ float scratch[kThreads / kWarpSize];
  const int64_t t = blockIdx.x;
  const bool is_sinkhorn = blockIdx.y == 1;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / kWarpSize;
  const int lane = tid % kWarpSize;

  // The streams were written before the mixes kernel started: role 0 loads the first
  // kPrefetchVecs float4 of its row (all of it up to D = 4096) while the mixes kernel is still
  // running, and the rest, if any, once the partials are ready.
  const int num_vecs = p.dim / 4;
  const int64_t row = is_sinkhorn ? -1 : StreamRow(p, t);
  const float4* rows_in = reinterpret_cast<const float4*>(p.streams + (row >= 0 ? row : 0) * kHc * p.dim);
  float4 sv[kVecsPerThread][kHc];
  auto load_vecs = [&](int r) {
    const int v = tid + r * kThreads;
#pragma unroll
    for (int i = 0; i < kHc; ++i) sv[r][i] = v < num_vecs && row >= 0 ? __ldg(rows_in + i * num_vecs + v) : Zero4();
  };
#pragma unroll
  for (int r = 0; r < kPrefetchVecs; ++r) load_vecs(r);
  WaitForPredecessor();
  AllowDependents();

  // Sum the split partials of the values this role needs, one warp per value, in a fixed
  // order (lane-strided sums, then the butterfly): the result never depends on timing.
  const int num_values = num_mixes + 1;
  const int first = is_sinkhorn ? kHc : 0;
  const int last = is_sinkhorn ? num_mixes : kHc;  // plus value num_mixes (sum of squares)
  const int count = last - first + 1;
  for (int i = warp; i < count; i += kThreads / kWarpSize) {
    const int v = i == count - 1 ? num_mixes : first + i;
    const float* src = p.workspace + WorkspaceIndex(t, v, 0, num_values, num_splits);
    // Loads in batches of kSplitBatch per lane, all in flight before the adds (a plain loop
    // waits one L2 round trip per split).
    float sum = 0.0f;
    for (int64_t sp0 = lane; sp0 < num_splits; sp0 += kSplitBatch * kWarpSize) {
      float part[kSplitBatch];
#pragma unroll
      for (int u = 0; u < kSplitBatch; ++u) {
        const int64_t sp = sp0 + u * kWarpSize;
        part[u] = sp < num_splits ? __ldg(src + sp) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kSplitBatch; ++u) sum += part[u];
    }
    sum = WarpSum(sum);
    if (lane == 0) mix[v] = sum;
  }
  __syncthreads();
  const float k = static_cast<float>(kHc * p.dim);
  const float prescale = 1.0f / sqrtf(mix[num_mixes] / k + p.norm_eps);

  if (is_sinkhorn) {
    if constexpr (kHc * kHc <= kWarpSize) {
      if (warp == 0) SinkhornWarp<kHc>(p, mix, prescale, t, lane);
    } else {
      if (tid == 0) Sinkhorn<kHc>(p, mix, prescale, t);
    }
    return;
  }

  float pre[kHc];
#pragma unroll
  for (int i = 0; i < kHc; ++i) pre[i] = Sigmoid(mix[i] * prescale * p.scale[0] + p.base[i]) + p.hc_eps;

  float4 x[kVecsPerThread];
  float ss = 0.0f;
#pragma unroll
  for (int r = 0; r < kVecsPerThread; ++r) {
    if (r >= kPrefetchVecs) load_vecs(r);
    x[r] = Zero4();
#pragma unroll
    for (int i = 0; i < kHc; ++i) {
      x[r].x += pre[i] * sv[r][i].x;
      x[r].y += pre[i] * sv[r][i].y;
      x[r].z += pre[i] * sv[r][i].z;
      x[r].w += pre[i] * sv[r][i].w;
    }
    ss = Dot4(x[r], x[r], ss);
  }
  ss = BlockSum<kThreads>(ss, scratch);
  const float rs = 1.0f / sqrtf(ss / static_cast<float>(p.dim) + p.norm_eps);
  const float4* w = reinterpret_cast<const float4*>(p.norm_weight);
  uint2* out = reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.x) + t * p.dim);
#pragma unroll
  for (int r = 0; r < kVecsPerThread; ++r) {
    const int v = tid + r * kThreads;
    if (v < num_vecs) {
      const float4 wv = __ldg(w + v);
      out[v] = make_uint2(PackBF16x2(x[r].x * rs * wv.x, x[r].y * rs * wv.y),
                          PackBF16x2(x[r].z * rs * wv.z, x[r].w * rs * wv.w));
    }
  }
}

// ---- Expand -----------------------------------------------------------------------------
// This thread's token t and first column e when each of num_tokens x dim / 8 threads takes 8
// columns of a token (the expand and the lane mean); false past the last.
__device__ __forceinline__ bool TokenAndColumn(int64_t num_tokens, int dim, int64_t* t, int64_t* e) {
  const int64_t per_token = dim / 8;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= num_tokens * per_token) return false;
  *t = idx / per_token;
  *e = (idx % per_token) * 8;
  return true;
}

// One thread per 8 columns of a token: reads the hc old streams and f there, writes the hc
// new ones (every read precedes every write of the same elements, so in place is safe).
template <int kHc>
__global__ void __launch_bounds__(kThreads) HcExpandKernel(const HcExpandParams p) {
  StartAfterPredecessor();
  int64_t t = 0, e = 0;
  if (!TokenAndColumn(p.num_tokens, p.dim, &t, &e)) return;

  float f[8];
  {
    const uint4 raw =
        p.f != nullptr
            ? __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.f) + t * p.dim + e))
            : CombineEight(p.moe_y, p.moe_topk_weights, p.moe_topk_ids, p.moe_shared, p.moe_top_k, p.dim, t,
                           static_cast<int>(e));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 v = __bfloat1622float2(h[i]);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
  float* s = p.streams + t * kHc * p.dim + e;
  float4 old[kHc][2];
#pragma unroll
  for (int j = 0; j < kHc; ++j) {
    old[j][0] = *reinterpret_cast<const float4*>(s + j * p.dim);
    old[j][1] = *reinterpret_cast<const float4*>(s + j * p.dim + 4);
  }
  const float* post = p.post + t * kHc;
  const float* comb = p.comb + t * kHc * kHc;
#pragma unroll
  for (int k = 0; k < kHc; ++k) {
    const float pk = __ldg(post + k);
    float4 o[2];
#pragma unroll
    for (int h = 0; h < 2; ++h)
      o[h] = make_float4(pk * f[4 * h], pk * f[4 * h + 1], pk * f[4 * h + 2], pk * f[4 * h + 3]);
#pragma unroll
    for (int j = 0; j < kHc; ++j) {
      const float c = __ldg(comb + j * kHc + k);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        o[h].x += c * old[j][h].x;
        o[h].y += c * old[j][h].y;
        o[h].z += c * old[j][h].z;
        o[h].w += c * old[j][h].w;
      }
    }
    reinterpret_cast<float4*>(s + k * p.dim)[0] = o[0];
    reinterpret_cast<float4*>(s + k * p.dim)[1] = o[1];
  }
}

// ---- Lane mean ---------------------------------------------------------------------------

__global__ void __launch_bounds__(kThreads) HcLaneMeanKernel(const HcLaneMeanParams p) {
  StartAfterPredecessor();
  int64_t t = 0, e = 0;
  if (!TokenAndColumn(p.num_tokens, p.dim, &t, &e)) return;
  const float* s = p.streams + t * p.hc * p.dim + e;
  float sum[8] = {};
  for (int j = 0; j < p.hc; ++j) {
    const float4 a = *reinterpret_cast<const float4*>(s + static_cast<int64_t>(j) * p.dim);
    const float4 b = *reinterpret_cast<const float4*>(s + static_cast<int64_t>(j) * p.dim + 4);
    const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) sum[i] = __fadd_rn(sum[i], v[i]);
  }
  const float n = static_cast<float>(p.hc);
  uint4 packed;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&packed);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(__fdiv_rn(sum[2 * i], n), __fdiv_rn(sum[2 * i + 1], n));
  *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.out) + t * p.out_stride + e) = packed;
}

// One thread per 8 columns of every token (the expand and the lane mean).
LaunchShape EightColumnsPerThread(int64_t num_tokens, int dim) {
  const int64_t threads = num_tokens * (dim / 8);
  return LaunchShape{dim3(static_cast<unsigned>((threads + kThreads - 1) / kThreads)), dim3(kThreads)};
}

// ---- Dispatch ---------------------------------------------------------------------------

template <size_t kIndex = 0>
cudaError_t LaunchMixes(const HcCollapseParams& p, int num_mixes, HcSplit split, cudaStream_t stream) {
  if constexpr (kIndex < kMixWidths.size()) {
    constexpr int kB = kMixWidths[kIndex];
    if (kMixGroups * kB < num_mixes) return LaunchMixes<kIndex + 1>(p, num_mixes, split, stream);
    const dim3 grid(static_cast<unsigned>(split.num_splits),
                    static_cast<unsigned>((p.num_tokens + kHcTokenTile - 1) / kHcTokenTile));
    return LaunchDependent(HcMixesKernel<kB>, LaunchShape{grid, dim3(kThreads)}, stream, p, num_mixes, split.num_splits,
                              split.units_per_split);
  } else {
    return cudaErrorInvalidValue;
  }
}

template <int kHc>
cudaError_t LaunchFinalize(const HcCollapseParams& p, int num_mixes, int64_t num_splits, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_tokens), p.has_comb ? 2u : 1u);
  return LaunchDependent(HcFinalizeKernel<kHc>, LaunchShape{grid, dim3(kThreads)}, stream, p, num_mixes, num_splits);
}

template <int kHc>
cudaError_t LaunchExpandTyped(const HcExpandParams& p, cudaStream_t stream) {
  return LaunchDependent(HcExpandKernel<kHc>, EightColumnsPerThread(p.num_tokens, p.dim), stream, p);
}

// hc -> the instantiation for it (1 .. kHcMaxMult).
template <template <int> class Fn, int kHc = 1, typename... Args>
cudaError_t ForHc(int hc, Args&&... args) {
  if constexpr (kHc <= kHcMaxMult) {
    if (hc == kHc) return Fn<kHc>::Run(args...);
    return ForHc<Fn, kHc + 1>(hc, args...);
  } else {
    return cudaErrorInvalidValue;
  }
}

template <int kHc>
struct FinalizeFn {
  static cudaError_t Run(const HcCollapseParams& p, int num_mixes, int64_t num_splits, cudaStream_t stream) {
    return LaunchFinalize<kHc>(p, num_mixes, num_splits, stream);
  }
};

template <int kHc>
struct ExpandFn {
  static cudaError_t Run(const HcExpandParams& p, cudaStream_t stream) { return LaunchExpandTyped<kHc>(p, stream); }
};

}  // namespace

namespace {

bool IsValid(const HcCollapseParams& p) {
  return p.hc >= 1 && p.hc <= kHcMaxMult && p.dim > 0 && p.dim % 8 == 0 && p.dim <= kHcMaxDim &&
         p.num_tokens <= (int64_t{1} << 31) - 1 && (p.num_tokens + kHcTokenTile - 1) / kHcTokenTile <= 65535;
}

int NumMixes(const HcCollapseParams& p) { return p.has_comb ? (2 + p.hc) * p.hc : p.hc; }

}  // namespace

cudaError_t LaunchHcMixes(const HcCollapseParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (!IsValid(p)) return cudaErrorInvalidValue;
  return LaunchMixes(p, NumMixes(p), HcSplitOf(p.num_tokens, static_cast<int64_t>(p.hc) * p.dim, p.batch_invariant),
                    stream);
}

cudaError_t LaunchHcFinalize(const HcCollapseParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (!IsValid(p)) return cudaErrorInvalidValue;
  const HcSplit split = HcSplitOf(p.num_tokens, static_cast<int64_t>(p.hc) * p.dim, p.batch_invariant);
  return ForHc<FinalizeFn>(p.hc, p, NumMixes(p), split.num_splits, stream);
}

cudaError_t LaunchHcCollapse(const HcCollapseParams& p, cudaStream_t stream) {
  const cudaError_t mixes = LaunchHcMixes(p, stream);
  if (mixes != cudaSuccess) return mixes;
  return LaunchHcFinalize(p, stream);
}

cudaError_t LaunchHcLaneMean(const HcLaneMeanParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.hc < 1 || p.hc > kHcMaxMult || p.dim <= 0 || p.dim % 8 != 0 || p.out_stride < p.dim || p.out_stride % 8 != 0)
    return cudaErrorInvalidValue;
  if ((p.num_tokens * (p.dim / 8) + kThreads - 1) / kThreads > (int64_t{1} << 31) - 1) return cudaErrorInvalidValue;
  return LaunchDependent(HcLaneMeanKernel, EightColumnsPerThread(p.num_tokens, p.dim), stream, p);
}

cudaError_t LaunchHcExpand(const HcExpandParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.hc < 1 || p.hc > kHcMaxMult || p.dim <= 0 || p.dim % 8 != 0) return cudaErrorInvalidValue;
  if (p.f == nullptr && (p.moe_y == nullptr || p.moe_topk_weights == nullptr || p.moe_topk_ids == nullptr ||
                         p.moe_top_k <= 0))
    return cudaErrorInvalidValue;
  if ((p.num_tokens * (p.dim / 8) + kThreads - 1) / kThreads > (int64_t{1} << 31) - 1) return cudaErrorInvalidValue;
  return ForHc<ExpandFn>(p.hc, p, stream);
}

}  // namespace peregrine::kernels
