// Device building blocks of the sampling kernel (kernels/sampling.cu, the only includer): the
// host sampler's arithmetic spelled with round-to-nearest intrinsics, ordered keys, block
// reductions and scans, the batched row pass, the bitonic sort, and the radix-select and
// threshold gathers. See bench/sampling_gpu/NOTES.md.
#pragma once

#include <cstdint>

#include "kernels/sampling.cuh"

namespace peregrine::kernels::sampling_detail {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = kSamplingMaxCandidates;
constexpr int kHistBits = 11;
constexpr int kHistBins = 1 << kHistBits;
constexpr int kWalkBlock = 1024;                          // cdf_walk.cc
constexpr int kMaxChains = 4 * (kSamplingMaxVocab / kWalkBlock);
constexpr int kNumBuckets = 160;                          // truncation.cc
constexpr uint32_t kOneBits = 0x3F800000u;
constexpr int kBucketShift = 21;
constexpr double kNucleusMargin = 1e-9;
constexpr float kExponentSlack = 0.02f;  // the host's 0.01, widened: logf vs std::log
constexpr float kNegInf = -__builtin_huge_valf();

struct Shared {
  uint64_t cand[kCap];     // candidate keys (see MoreLikelyKey / IdKey)
  float cand_w[kCap];      // weights of the candidates, by position after the MoreLikely sort
  uint32_t hist[kHistBins];  // radix histogram; reused as float[kWalkBlock] walk weights
  double chain[kMaxChains];  // FixedOrderSum chains of the full-vocabulary walk
  double bucket_mass[kNumBuckets];
  uint64_t red[kWarps];
  uint32_t scan[kWarps];
  uint32_t count;
  uint32_t sel_bin;
  uint32_t sel_above;
  int32_t found;
  float cluster_max;  // this CTA's part of the row maximum, read by its cluster (full-vocabulary walk)
};

// ---- exactly the host's arithmetic (src/sampling/exp.h, weights.h) -------------------------

__device__ __forceinline__ float ExpNonPositive(float y) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kRoundToInt = 12582912.0f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kMinExponent = -87.0f;
  const float y_clamped = y >= kMinExponent ? (y <= 0.0f ? y : 0.0f) : kMinExponent;
  const float n = __fsub_rn(__fadd_rn(__fmul_rn(y_clamped, kLog2e), kRoundToInt), kRoundToInt);
  const float r = __fsub_rn(__fsub_rn(y_clamped, __fmul_rn(n, kLn2Hi)), __fmul_rn(n, kLn2Lo));
  float p = 1.0f / 5040.0f;
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 720.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 120.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 24.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f / 6.0f);
  p = __fadd_rn(__fmul_rn(p, r), 0.5f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  p = __fadd_rn(__fmul_rn(p, r), 1.0f);
  const float two_to_n = __uint_as_float(static_cast<uint32_t>(__float2int_rz(n) + 127) << 23);
  const float value = __fmul_rn(p, two_to_n);
  return y >= kMinExponent ? value : 0.0f;
}

__device__ __forceinline__ float TemperatureWeight(float logit, float max_logit, float inv_t) {
  const float e = ExpNonPositive(__fmul_rn(__fsub_rn(logit, max_logit), inv_t));
  return logit >= max_logit ? 1.0f : e;
}

__device__ __forceinline__ double Add(double a, double b) { return __dadd_rn(a, b); }

// ---- keys -----------------------------------------------------------------------------------

// Monotone map of floats to unsigned integers; -0 is folded into +0 (the host compares values).
__device__ __forceinline__ uint32_t Ordered(float v) {
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float FromOrdered(uint32_t o) {
  return __uint_as_float((o & 0x80000000u) ? (o & 0x7FFFFFFFu) : ~o);
}
// Larger key = more likely: larger logit, then lower id (the host's MoreLikely).
__device__ __forceinline__ uint64_t MoreLikelyKey(float v, int32_t id) {
  return (static_cast<uint64_t>(Ordered(v)) << 32) | static_cast<uint32_t>(~id);
}
__device__ __forceinline__ float KeyLogit(uint64_t key) { return FromOrdered(static_cast<uint32_t>(key >> 32)); }
__device__ __forceinline__ int32_t KeyId(uint64_t key) { return static_cast<int32_t>(~static_cast<uint32_t>(key)); }

// ---- block primitives -----------------------------------------------------------------------

template <typename T, typename Op>
__device__ __forceinline__ T BlockReduce(T v, Op op, Shared& s) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, off));
  T* scratch = reinterpret_cast<T*>(s.red);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  T r = scratch[0];
  for (int w = 1; w < kWarps; ++w) r = op(r, scratch[w]);
  __syncthreads();
  return r;
}
struct MaxF {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};
struct MaxU64 {
  __device__ uint64_t operator()(uint64_t a, uint64_t b) const { return b > a ? b : a; }
};
struct MaxI {
  __device__ int operator()(int a, int b) const { return b > a ? b : a; }
};
struct SumD {
  __device__ double operator()(double a, double b) const { return a + b; }
};
struct SumU {
  __device__ uint32_t operator()(uint32_t a, uint32_t b) const { return a + b; }
};

// Exclusive prefix sum over the threads in id order.
__device__ __forceinline__ uint32_t BlockExclusiveScan(uint32_t v, Shared& s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t inc = v;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const uint32_t o = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += o;
  }
  if (lane == 31) s.scan[warp] = inc;
  __syncthreads();
  uint32_t base = 0;
  for (int w = 0; w < warp; ++w) base += s.scan[w];
  __syncthreads();
  return base + inc - v;
}

// Visits every element of the row once, coalesced (float4 where the row allows it). A row is
// streamed by one block of 16 warps, so the pass is bound by the loads in flight: each thread
// issues kLoadBatch float4 loads before using any of them (64 KB per SM in flight). Each thread
// still visits its elements in increasing index order, as a plain strided loop would.
constexpr int kLoadBatch = 8;
template <typename Fn>
__device__ __forceinline__ void ForEach(const float* x, int n, Fn fn) {
  if ((n & 3) == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const int n4 = n >> 2;
    int i = threadIdx.x;
    for (; i + (kLoadBatch - 1) * kThreads < n4; i += kLoadBatch * kThreads) {
      float4 v[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) v[u] = x4[i + u * kThreads];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int j = 4 * (i + u * kThreads);
        fn(j, v[u].x);
        fn(j + 1, v[u].y);
        fn(j + 2, v[u].z);
        fn(j + 3, v[u].w);
      }
    }
    for (; i < n4; i += kThreads) {
      const float4 v = x4[i];
      fn(4 * i, v.x);
      fn(4 * i + 1, v.y);
      fn(4 * i + 2, v.z);
      fn(4 * i + 3, v.w);
    }
  } else {
    int i = threadIdx.x;
    for (; i + (kLoadBatch - 1) * kThreads < n; i += kLoadBatch * kThreads) {
      float v[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) v[u] = x[i + u * kThreads];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) fn(i + u * kThreads, v[u]);
    }
    for (; i < n; i += kThreads) fn(i, x[i]);
  }
}

// Descending bitonic sort of s.cand[0, n) (padded with 0 to a power of two); with `weights`,
// s.cand_w moves along.
__device__ inline void SortDescending(Shared& s, int n, bool weights) {
  int size = 1;
  while (size < n) size <<= 1;
  for (int i = n + static_cast<int>(threadIdx.x); i < size; i += kThreads) s.cand[i] = 0;
  __syncthreads();
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = threadIdx.x; i < size; i += kThreads) {
        const int l = i ^ j;
        if (l <= i) continue;
        const uint64_t a = s.cand[i], b = s.cand[l];
        if ((i & k) == 0 ? a < b : a > b) {
          s.cand[i] = b;
          s.cand[l] = a;
          if (weights) {
            const float t = s.cand_w[i];
            s.cand_w[i] = s.cand_w[l];
            s.cand_w[l] = t;
          }
        }
      }
      __syncthreads();
    }
  }
}

// ---- radix select + gather ------------------------------------------------------------------

// Gathers into s.cand every element whose key (0: excluded) is among the k largest, compared
// on the top `bits` bits (ties at the k-th all kept), or every non-zero key when there are at
// most k. Histogram passes narrow the threshold until the gathered set fits kCap.
// Returns the number gathered, or -1 when even the exact threshold keeps more than kCap.
template <typename KeyFn>
__device__ int GatherTop(const float* x, int n, uint32_t k, int bits, KeyFn key, Shared& s) {
  uint64_t prefix = 0;   // the selected high bits so far
  int prefix_bits = 0;
  uint32_t above_total = 0;  // keys above the prefix's range (all gathered)
  uint64_t threshold = 1;    // gather keys >= threshold (compared on `bits` bits)
  bool first = true;
  for (;;) {
    const int d = min(kHistBits, bits - prefix_bits);
    for (int i = threadIdx.x; i < kHistBins; i += kThreads) s.hist[i] = 0;
    __syncthreads();
    ForEach(x, n, [&](int i, float v) {
      const uint64_t kk = key(i, v);
      if (kk == 0) return;
      if (prefix_bits > 0 && (kk >> (64 - prefix_bits)) != prefix) return;
      atomicAdd(&s.hist[(kk >> (64 - prefix_bits - d)) & ((1u << d) - 1)], 1u);
    });
    __syncthreads();
    // Thread t owns bins [4t, 4t + 4); suffix counts run from the top bin down.
    constexpr int kPer = kHistBins / kThreads;
    const int t = threadIdx.x;
    uint32_t local = 0;
    for (int b = 0; b < kPer; ++b) local += s.hist[t * kPer + b];
    const uint32_t prior = BlockExclusiveScan(local, s);  // bins of lower threads
    const uint32_t total = BlockReduce(local, SumU{}, s);
    const uint32_t above_mine = total - prior - local;  // bins of higher threads
    if (first && total <= k) {
      // At most k valid keys: all of them are kept.
      if (total > static_cast<uint32_t>(kCap)) return -1;
      threshold = 1;
      break;
    }
    first = false;
    if (t == 0) s.found = 0;
    __syncthreads();
    uint32_t above = above_mine;
    for (int b = kPer - 1; b >= 0; --b) {
      const uint32_t h = s.hist[t * kPer + b];
      if (above < k && k <= above + h) {
        s.sel_bin = static_cast<uint32_t>(t * kPer + b);
        s.sel_above = above;
        s.found = 1;
      }
      above += h;
    }
    __syncthreads();
    const uint32_t bin = s.sel_bin, above_bin = s.sel_above;
    const uint32_t in_bin = s.hist[bin];
    __syncthreads();
    const uint64_t new_prefix = (prefix << d) | bin;
    const int new_bits = prefix_bits + d;
    const uint32_t count_ge = above_total + above_bin + in_bin;
    if (count_ge <= static_cast<uint32_t>(kCap)) {
      threshold = new_prefix << (64 - new_bits);
      break;
    }
    if (new_bits >= bits) return -1;  // ties at the k-th value alone exceed the capacity
    above_total += above_bin;
    k -= above_bin;
    prefix = new_prefix;
    prefix_bits = new_bits;
  }
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  const int drop = 64 - bits;
  ForEach(x, n, [&](int i, float v) {
    const uint64_t kk = key(i, v);
    if (kk == 0 || (kk >> drop) < (threshold >> drop)) return;
    const uint32_t slot = atomicAdd(&s.count, 1u);
    if (slot < static_cast<uint32_t>(kCap)) s.cand[slot] = kk;
  });
  __syncthreads();
  const int count = static_cast<int>(s.count);
  __syncthreads();
  return count <= kCap ? count : -1;
}

// Every element with TemperatureWeight > floor (>= when inclusive) into s.cand as MoreLikely
// keys; -1 when more than kCap. The exponent pre-test only skips the exponential (truncation.cc).
// Once the count is seen past kCap the row is an overflow whatever follows (the count only
// grows), so the remaining candidates skip the exponential and the contended atomic.
__device__ inline int GatherAbove(const float* x, int n, float max_logit, float inv_t, float floor, bool inclusive,
                           Shared& s) {
  const float exponent_floor = floor > 0.0f ? logf(floor) - kExponentSlack : kNegInf;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  const volatile uint32_t* const count_seen = &s.count;
  ForEach(x, n, [&](int i, float v) {
    if (!(v >= max_logit || __fmul_rn(__fsub_rn(v, max_logit), inv_t) >= exponent_floor)) return;
    if (*count_seen > static_cast<uint32_t>(kCap)) return;
    const float w = TemperatureWeight(v, max_logit, inv_t);
    if (!(w > floor || (inclusive && w == floor))) return;
    const uint32_t slot = atomicAdd(&s.count, 1u);
    if (slot < static_cast<uint32_t>(kCap)) s.cand[slot] = MoreLikelyKey(v, i);
  });
  __syncthreads();
  const int count = static_cast<int>(s.count);
  __syncthreads();
  return count <= kCap ? count : -1;
}

// Largest logit, NaN skipped (MaxLogit).
__device__ inline float RowMax(const float* x, int n, Shared& s) {
  float m = kNegInf;
  ForEach(x, n, [&](int, float v) { m = v > m ? v : m; });
  return BlockReduce(m, MaxF{}, s);
}

}  // namespace peregrine::kernels::sampling_detail
