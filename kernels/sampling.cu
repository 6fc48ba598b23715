// The sampling kernel: one block per row. Every floating-point step the host sampler takes is
// spelled with round-to-nearest intrinsics (no contraction into FMA), so weights, sums and the
// chosen token are bit-identical to src/sampling. See bench/sampling_gpu/NOTES.md.
#include "kernels/sampling.cuh"

#include <cooperative_groups.h>

#include <cstdint>

namespace peregrine::kernels {

namespace {

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
  float cluster_max;  // the row maximum, read by the other CTAs of a cluster (full-vocabulary walk)
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
__device__ void SortDescending(Shared& s, int n, bool weights) {
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
__device__ int GatherAbove(const float* x, int n, float max_logit, float inv_t, float floor, bool inclusive,
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
__device__ float RowMax(const float* x, int n, Shared& s) {
  float m = kNegInf;
  ForEach(x, n, [&](int, float v) { m = v > m ? v : m; });
  return BlockReduce(m, MaxF{}, s);
}

// ---- clusters (sm_90): a full-vocabulary walk spreads its chains over the CTAs of one row ------

// Barrier over every thread of the cluster, release/acquire at cluster scope: the edits rank 0
// wrote to the logits and its shared memory are visible to every rank after it.
__device__ __forceinline__ void ClusterSync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::this_cluster().sync();
#else
  __trap();  // never launched: LaunchSampling uses clusters on sm_90 and later only
#endif
}
__device__ __forceinline__ int ClusterRank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
  return 0;
#endif
}
template <typename T>
__device__ __forceinline__ T* ClusterPeer(T* local, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(local, static_cast<unsigned>(rank));
#else
  __trap();
  return local;
#endif
}

// The 1024-blocks whose chains rank `rank` of `cluster` CTAs sums: [*begin, *end).
__device__ __forceinline__ void ChainRange(int num_blocks, int cluster, int rank, int* begin, int* end) {
  const int per = (num_blocks + cluster - 1) / cluster;
  *begin = min(num_blocks, rank * per);
  *end = min(num_blocks, *begin + per);
}

// ---- the paths ------------------------------------------------------------------------------

// FixedOrderSum chains of the 1024-blocks [block_begin, block_end) into s.chain.
__device__ void SumChains(const float* x, int n, float max_logit, float inv_t, int block_begin, int block_end,
                          Shared& s) {
  constexpr int kChainBatch = 16;
  for (int c = 4 * block_begin + static_cast<int>(threadIdx.x); c < 4 * block_end; c += kThreads) {
    const int b = c >> 2, k = c & 3;
    const int begin = b * kWalkBlock;
    const int size = min(kWalkBlock, n - begin);
    const int quads = size / 4;
    const float* xb = x + begin + k;
    double sum = 0.0;
    int j = 0;
    for (; j + kChainBatch <= quads; j += kChainBatch) {
      float v[kChainBatch];
#pragma unroll
      for (int t = 0; t < kChainBatch; ++t) v[t] = xb[4 * (j + t)];
#pragma unroll
      for (int t = 0; t < kChainBatch; ++t) sum = Add(sum, static_cast<double>(TemperatureWeight(v[t], max_logit, inv_t)));
    }
    for (; j < quads; ++j) sum = Add(sum, static_cast<double>(TemperatureWeight(xb[4 * j], max_logit, inv_t)));
    if (k == 0) {
      for (int i = 4 * quads; i < size; ++i) sum = Add(sum, static_cast<double>(TemperatureWeight(x[begin + i], max_logit, inv_t)));
    }
    s.chain[c] = sum;
  }
}

// The ranks other than 0 of a cluster on a full-vocabulary-walk row: their share of the chains,
// between the barriers WalkFullVocab<kCluster> on rank 0 matches one for one.
template <int kCluster>
__device__ void WalkFullVocabPeer(const float* x, int n, float inv_t, Shared& s) {
  ClusterSync();  // 1: rank 0 has applied the edits and published the maximum
  const float max_logit = *ClusterPeer(&s.cluster_max, 0);
  int begin, end;
  ChainRange((n + kWalkBlock - 1) / kWalkBlock, kCluster, ClusterRank(), &begin, &end);
  SumChains(x, n, max_logit, inv_t, begin, end, s);
  ClusterSync();  // 2: every chain is summed
  ClusterSync();  // 3: rank 0 has copied them; this CTA's shared memory may go
}

// WalkFullVocab: per 1024-block FixedOrderSum (four chains, tail to the first), block masses
// added in order, then one block walked token by token. Every sum is the host's, in the host's
// order; only the loads are batched ahead of the dependent adds. With kCluster > 1 the chains
// are summed by the kCluster CTAs of the row's cluster (each a range of blocks, the same sums)
// and copied here through distributed shared memory.
template <int kCluster>
__device__ int32_t WalkFullVocab(const float* x, int n, float max_logit, float inv_t, double u, Shared& s) {
  const int num_blocks = (n + kWalkBlock - 1) / kWalkBlock;
  if constexpr (kCluster > 1) {
    if (threadIdx.x == 0) s.cluster_max = max_logit;
    ClusterSync();  // 1
    int begin, end;
    ChainRange(num_blocks, kCluster, 0, &begin, &end);
    SumChains(x, n, max_logit, inv_t, begin, end, s);
    ClusterSync();  // 2
    for (int rank = 1; rank < kCluster; ++rank) {
      ChainRange(num_blocks, kCluster, rank, &begin, &end);
      const double* peer = ClusterPeer(s.chain, rank);
      for (int c = 4 * begin + static_cast<int>(threadIdx.x); c < 4 * end; c += kThreads) s.chain[c] = peer[c];
    }
    ClusterSync();  // 3
  } else {
    SumChains(x, n, max_logit, inv_t, 0, num_blocks, s);
    __syncthreads();
  }
  // Block masses side by side (s.cand is unused on this path), so that the serial loops below
  // do one dependent add per block.
  static_assert(kSamplingMaxVocab / kWalkBlock * sizeof(double) <= sizeof(Shared::cand), "block masses in s.cand");
  double* const block_mass = reinterpret_cast<double*>(s.cand);  // [num_blocks]
  for (int b = threadIdx.x; b < num_blocks; b += kThreads) {
    const double* ch = s.chain + 4 * b;
    block_mass[b] = Add(Add(ch[0], ch[1]), Add(ch[2], ch[3]));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int b = 0; b < num_blocks; ++b) total = Add(total, block_mass[b]);
    const double target = __dmul_rn(u, total);
    double cumulative = 0.0;
    int chosen = -1;
    for (int b = 0; b < num_blocks; ++b) {
      const double mass = block_mass[b];
      if (mass <= 0.0 || Add(cumulative, mass) <= target) {
        cumulative = Add(cumulative, mass);
        continue;
      }
      chosen = b;
      break;
    }
    s.found = chosen;
    s.bucket_mass[0] = cumulative;
    s.bucket_mass[1] = target;
  }
  __syncthreads();
  const int chosen = s.found;
  if (chosen >= 0) {
    // The block's weights, zero-padded to kWalkBlock (zero weights are skipped by the walk).
    float* w = reinterpret_cast<float*>(s.hist);
    const int begin = chosen * kWalkBlock;
    const int size = min(kWalkBlock, n - begin);
    for (int j = threadIdx.x; j < kWalkBlock; j += kThreads) {
      w[j] = j < size ? TemperatureWeight(x[begin + j], max_logit, inv_t) : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double cumulative = s.bucket_mass[0];
      const double target = s.bucket_mass[1];
      int32_t result = -1;
      // Four weights per shared load, the next quad loaded before the current one is walked.
      const float4* w4 = reinterpret_cast<const float4*>(w);
      float4 next = w4[0];
      bool done = false;
      for (int q = 0; q < kWalkBlock / 4 && !done; ++q) {
        const float4 cur = next;
        if (q + 1 < kWalkBlock / 4) next = w4[q + 1];
        const float quad[4] = {cur.x, cur.y, cur.z, cur.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          if (done || quad[t] <= 0.0f) continue;
          result = begin + 4 * q + t;
          cumulative = Add(cumulative, static_cast<double>(quad[t]));
          done = cumulative > target;
        }
      }
      s.found = result;
    }
    __syncthreads();
    const int32_t token = s.found;
    __syncthreads();
    return token;
  }
  // u * total rounded up to total: the last token that can be drawn at all.
  int last = -1;
  ForEach(x, n, [&](int i, float v) {
    if (TemperatureWeight(v, max_logit, inv_t) > 0.0f) last = i > last ? i : last;
  });
  last = BlockReduce(last, MaxI{}, s);
  return last >= 0 ? last : 0;
}

__device__ __forceinline__ uint32_t BucketOf(float weight) {
  const uint32_t below_one = kOneBits - __float_as_uint(weight);
  return min(below_one >> kBucketShift, static_cast<uint32_t>(kNumBuckets - 1));
}

// Lowest biased exponent of the weights in bucket b (b < kNumBuckets - 1): a bucket spans
// 2^21 float encodings, so at most two adjacent binades.
__device__ __forceinline__ uint32_t BucketLowExponent(uint32_t b) {
  return (kOneBits - ((b + 1) << kBucketShift) + 1) >> 23;
}

// Nucleus without top-k: the weight floor of the buckets the nucleus reaches (truncation.cc's
// Nucleus up to the gather). Every bucket but the last holds weights of at most two adjacent
// binades, all multiples of the lower binade's ulp q, at most 2^18 of them: every partial sum of the
// host's double sum is exact whatever its order, and equals (integer count of q) * q. The
// device adds those integers (24-bit significand, shifted by one in the upper binade) with
// 32-bit shared atomics and a carry word, one copy per warp (in s.cand, unused until the
// gather), and converts once: the same doubles as the host, bit for bit. The last bucket
// (weights below 2^-39) is summed in double in another order than the host's (NOTES.md).
__device__ float NucleusFloor(const float* x, int n, float max_logit, float inv_t, float top_p, double* target_out,
                              Shared& s) {
  static_assert(2 * kWarps * kNumBuckets * sizeof(uint32_t) <= sizeof(Shared::cand), "bucket counters in s.cand");
  uint32_t* const lo_all = reinterpret_cast<uint32_t*>(s.cand);      // [kWarps, kNumBuckets]
  uint32_t* const hi_all = lo_all + kWarps * kNumBuckets;            // [kWarps, kNumBuckets]
  for (int i = threadIdx.x; i < 2 * kWarps * kNumBuckets; i += kThreads) lo_all[i] = 0;
  __syncthreads();
  uint32_t* const lo = lo_all + (threadIdx.x / 32) * kNumBuckets;
  uint32_t* const hi = hi_all + (threadIdx.x / 32) * kNumBuckets;
  double tail = 0.0;
  ForEach(x, n, [&](int, float v) {
    const float w = TemperatureWeight(v, max_logit, inv_t);
    const uint32_t b = BucketOf(w);
    if (b == kNumBuckets - 1) {
      tail = Add(tail, static_cast<double>(w));
      return;
    }
    const uint32_t bits = __float_as_uint(w);
    const uint32_t units = ((bits & 0x7FFFFFu) | 0x800000u) << ((bits >> 23) - BucketLowExponent(b));
    const uint32_t old = atomicAdd(&lo[b], units);
    if (old + units < old) atomicAdd(&hi[b], 1u);
  });
  __syncthreads();
  for (int b = threadIdx.x; b < kNumBuckets - 1; b += kThreads) {
    uint64_t units = 0;  // below 2^18 * 2^25 = 2^43: exact in double
    for (int w = 0; w < kWarps; ++w) {
      units += (static_cast<uint64_t>(hi_all[w * kNumBuckets + b]) << 32) | lo_all[w * kNumBuckets + b];
    }
    // q = 2^(low exponent - 127 - 23), a normal double; the product is exact.
    const double q = __longlong_as_double(
        static_cast<int64_t>(static_cast<int>(BucketLowExponent(static_cast<uint32_t>(b))) - 150 + 1023) << 52);
    s.bucket_mass[b] = __dmul_rn(static_cast<double>(units), q);
  }
  tail = BlockReduce(tail, SumD{}, s);
  if (threadIdx.x == 0) {
    s.bucket_mass[kNumBuckets - 1] = tail;
    double total = 0.0;
    for (int b = 0; b < kNumBuckets; ++b) total = Add(total, s.bucket_mass[b]);
    const double target = __dmul_rn(static_cast<double>(top_p), total);
    const double stop = Add(target, __dmul_rn(kNucleusMargin, total));
    int last_bucket = kNumBuckets - 1;
    double cumulative = 0.0;
    for (int b = 0; b + 1 < kNumBuckets; ++b) {
      cumulative = Add(cumulative, s.bucket_mass[b]);
      if (cumulative >= stop) {
        last_bucket = b;
        break;
      }
    }
    s.found = last_bucket;
    s.bucket_mass[0] = target;
  }
  __syncthreads();
  const int last_bucket = s.found;
  *target_out = s.bucket_mass[0];
  __syncthreads();
  return last_bucket + 1 < kNumBuckets
             ? __uint_as_float(kOneBits - (static_cast<uint32_t>(last_bucket + 1) << kBucketShift))
             : 0.0f;
}

// From s.cand[0, count) (MoreLikely keys, any order): top-p prefix (when target >= 0 or
// top_p < 1 with the sum taken here), min-p filter, ascending-id walk. WalkKept's contract.
__device__ int32_t FinishKept(int count, float max_logit_or_nan, float inv_t, float top_p, double nucleus_target,
                              float min_p, double u, bool sorted_prefix, Shared& s) {
  SortDescending(s, count, false);
  // Weights relative to the largest kept logit (top-k) or the row maximum (nucleus, min-p).
  const float max_logit = isnan(max_logit_or_nan) ? (count > 0 ? KeyLogit(s.cand[0]) : kNegInf) : max_logit_or_nan;
  for (int i = threadIdx.x; i < count; i += kThreads) s.cand_w[i] = TemperatureWeight(KeyLogit(s.cand[i]), max_logit, inv_t);
  __syncthreads();
  if (threadIdx.x == 0) {
    int kept = count;
    if (sorted_prefix) {
      double target = nucleus_target;
      if (target < 0.0) {  // top-k then top-p: the total of the kept, most likely first
        double total = 0.0;
        for (int i = 0; i < count; ++i) total = Add(total, static_cast<double>(s.cand_w[i]));
        target = __dmul_rn(static_cast<double>(top_p), total);
      }
      double cumulative = 0.0;
      for (int i = 0; i < count; ++i) {
        cumulative = Add(cumulative, static_cast<double>(s.cand_w[i]));
        if (cumulative >= target) {
          kept = i + 1;
          break;
        }
      }
    }
    s.count = static_cast<uint32_t>(kept);
  }
  __syncthreads();
  const int kept = static_cast<int>(s.count);
  // Ascending id order; min-p drops entries (key 0 sorts last).
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const bool keep = i < kept && !(s.cand_w[i] < min_p);
    s.cand[i] = keep ? (static_cast<uint64_t>(~static_cast<uint32_t>(KeyId(s.cand[i]))) << 32) | static_cast<uint32_t>(i)
                     : 0;
  }
  __syncthreads();
  SortDescending(s, count, false);
  if (threadIdx.x == 0) {
    double total = 0.0;
    int m = 0;
    for (; m < count && s.cand[m] != 0; ++m) total = Add(total, static_cast<double>(s.cand_w[static_cast<uint32_t>(s.cand[m])]));
    const double target = __dmul_rn(u, total);
    double cumulative = 0.0;
    int32_t last_positive = 0;
    int32_t result = -1;
    for (int i = 0; i < m; ++i) {
      const float w = s.cand_w[static_cast<uint32_t>(s.cand[i])];
      if (w <= 0.0f) continue;
      cumulative = Add(cumulative, static_cast<double>(w));
      last_positive = static_cast<int32_t>(~static_cast<uint32_t>(s.cand[i] >> 32));
      if (cumulative > target) {
        result = last_positive;
        break;
      }
    }
    s.found = result >= 0 ? result : last_positive;
  }
  __syncthreads();
  const int32_t token = s.found;
  __syncthreads();
  return token;
}

__device__ void ApplyEdits(float* x, int n, const SamplingEdit* edits, float* edit_raw, int begin, int end) {
  for (int e = begin + static_cast<int>(threadIdx.x); e < end; e += kThreads) {
    const int32_t token = edits[e].token;
    if (e > begin && edits[e - 1].token == token) continue;  // not the start of this token's run
    int last = e;
    while (last + 1 < end && edits[last + 1].token == token) ++last;
    const bool in_vocab = token >= 0 && token < n;
    const float raw = in_vocab ? x[token] : 0.0f;
    float v = raw;
    for (int f = e; f <= last; ++f) {
      const double value = edits[f].value;
      switch (static_cast<SamplingEditOp>(edits[f].op)) {
        case SamplingEditOp::kAdd:
          v = __fadd_rn(v, static_cast<float>(value));
          break;
        case SamplingEditOp::kRepetition:
          v = v > 0.0f ? __fdiv_rn(v, static_cast<float>(value)) : __fmul_rn(v, static_cast<float>(value));
          break;
        case SamplingEditOp::kSubtract:
          v = __double2float_rn(__dsub_rn(static_cast<double>(v), value));
          break;
      }
      edit_raw[f] = raw;
    }
    if (in_vocab) x[token] = v;
  }
  __syncthreads();
}

__device__ __forceinline__ float Sanitized(float v) { return isnan(v) ? kNegInf : v; }

__device__ __forceinline__ float RawLogprob(float logit, double log_normalizer) {
  const double lp = __dsub_rn(static_cast<double>(Sanitized(logit)), log_normalizer);
  return isnan(lp) ? kNegInf : __double2float_rn(lp);
}

// The setting whose sampling is WalkFullVocab: the kernel's branch below, spelled once more for
// the other ranks of a cluster, which must take the same barriers exactly when rank 0 does.
__device__ __forceinline__ bool IsFullWalk(const SamplingRow& r, int n) {
  const bool has_top_k = r.top_k > 0 && r.top_k < n;
  const bool has_top_p = r.top_p < 1.0f;
  const float min_p = fminf(r.min_p, 1.0f);
  return r.temperature > 0.0f && !has_top_k && !(has_top_p || min_p > 0.0f);
}

// kCluster CTAs per row (a thread-block cluster when > 1): rank 0 does everything; the others
// only help with a full-vocabulary walk's chains and leave at once on any other row.
template <int kCluster>
__global__ void __launch_bounds__(kThreads, 1) SamplingKernel(const SamplingKernelParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& s = *reinterpret_cast<Shared*>(smem);
  const int64_t row = blockIdx.x / kCluster;
  const int n = p.vocab;
  float* x = p.logits + row * n;
  const SamplingRow r = p.rows[row];
  const int tid = threadIdx.x;
  if constexpr (kCluster > 1) {
    if (ClusterRank() != 0) {
      if (IsFullWalk(r, n)) WalkFullVocabPeer<kCluster>(x, n, r.inv_temperature, s);
      return;
    }
  }

  // 1. Raw logprobs, before any edit (raw_logprobs.cc; the normalizer to ~1e-7, not bit-exact).
  double log_normalizer = 0.0;
  const bool wants_logprobs = r.num_top_logprobs >= 0;
  if (wants_logprobs) {
    const float m = RowMax(x, n, s);
    if (isinf(m)) {
      log_normalizer = m;
    } else {
      double sum = 0.0;
      ForEach(x, n, [&](int, float v) {
        if (v > kNegInf) sum += static_cast<double>(expf(v - m));  // NaN fails the test
      });
      sum = BlockReduce(sum, SumD{}, s);
      log_normalizer = static_cast<double>(m) + log(sum);
    }
    const int num_top = min(r.num_top_logprobs, min(n, kSamplingMaxTopLogprobs));
    int got = 0;
    if (num_top > 0) {
      got = GatherTop(x, n, static_cast<uint32_t>(num_top), 64,
                      [](int i, float v) { return MoreLikelyKey(Sanitized(v), i); }, s);
      if (got > 0) SortDescending(s, got, false);
    }
    for (int i = tid; i < kSamplingMaxTopLogprobs; i += kThreads) {
      const bool has = i < num_top && i < got;
      p.top_tokens[row * kSamplingMaxTopLogprobs + i] = has ? KeyId(s.cand[i]) : -1;
      p.top_logprobs[row * kSamplingMaxTopLogprobs + i] = has ? RawLogprob(KeyLogit(s.cand[i]), log_normalizer) : 0.0f;
    }
    __syncthreads();
  } else {
    for (int i = tid; i < kSamplingMaxTopLogprobs; i += kThreads) {
      p.top_tokens[row * kSamplingMaxTopLogprobs + i] = -1;
      p.top_logprobs[row * kSamplingMaxTopLogprobs + i] = 0.0f;
    }
  }

  // 2. Edits in place (logits_processors.cc).
  const int edit_begin = p.edit_offsets[row], edit_end = p.edit_offsets[row + 1];
  if (edit_end > edit_begin) ApplyEdits(x, n, p.edits, p.edit_raw, edit_begin, edit_end);

  // 3. The token.
  int32_t token = 0;
  bool overflow = false;
  if (!(r.temperature > 0.0f)) {
    uint64_t best = 0;
    ForEach(x, n, [&](int i, float v) {
      const uint64_t k = MoreLikelyKey(Sanitized(v), i);
      best = k > best ? k : best;
    });
    token = KeyId(BlockReduce(best, MaxU64{}, s));
  } else {
    const float inv_t = r.inv_temperature;
    const bool has_top_k = r.top_k > 0 && r.top_k < n;
    const bool has_top_p = r.top_p < 1.0f;
    const float min_p = fminf(r.min_p, 1.0f);
    if (has_top_k) {
      // Valid logits (not NaN, not -inf) compared on the value alone: ties at the k-th kept.
      const int got = GatherTop(x, n, static_cast<uint32_t>(r.top_k), 32,
                                [](int i, float v) { return v >= -3.402823466e38f ? MoreLikelyKey(v, i) : uint64_t{0}; }, s);
      if (got < 0) {
        overflow = true;
      } else {
        SortDescending(s, got, false);
        int count = got;
        if (got > r.top_k) {
          const uint32_t kth = static_cast<uint32_t>(s.cand[r.top_k - 1] >> 32);
          if (tid == 0) {
            int c = r.top_k;
            while (c < got && static_cast<uint32_t>(s.cand[c] >> 32) >= kth) ++c;
            s.count = static_cast<uint32_t>(c);
          }
          __syncthreads();
          count = static_cast<int>(s.count);
          __syncthreads();
        }
        token = FinishKept(count, __int_as_float(0x7fc00000), inv_t, r.top_p, -1.0, min_p, r.u, has_top_p, s);
      }
    } else if (has_top_p || min_p > 0.0f) {
      const float m = RowMax(x, n, s);
      int got;
      double target = -1.0;
      if (has_top_p) {
        const float floor = NucleusFloor(x, n, m, inv_t, r.top_p, &target, s);
        got = GatherAbove(x, n, m, inv_t, floor, false, s);
      } else {
        got = GatherAbove(x, n, m, inv_t, min_p, true, s);
      }
      if (got < 0) {
        overflow = true;
      } else {
        token = FinishKept(got, m, inv_t, r.top_p, target, min_p, r.u, has_top_p, s);
      }
    } else {
      token = WalkFullVocab<kCluster>(x, n, RowMax(x, n, s), inv_t, r.u, s);  // IsFullWalk(r, n)
    }
  }

  // 4. Outputs; the chosen token's raw logit is the saved one when an edit changed it.
  if (tid == 0) {
    p.status[row] = overflow ? kSamplingOverflow : kSamplingOk;
    p.tokens[row] = overflow ? -1 : token;
    float lp = 0.0f;
    if (wants_logprobs && !overflow) {
      float raw = x[token];
      int lo = edit_begin, hi = edit_end;  // first edit with edits[i].token >= token
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (p.edits[mid].token < token) lo = mid + 1; else hi = mid;
      }
      if (lo < edit_end && p.edits[lo].token == token) raw = p.edit_raw[lo];
      lp = RawLogprob(raw, log_normalizer);
    }
    p.logprobs[row] = lp;
  }
}

template <int kCluster>
cudaError_t LaunchWithCluster(const SamplingKernelParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(Shared);
  const cudaError_t attr = cudaFuncSetAttribute(SamplingKernel<kCluster>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(kSmem));
  if (attr != cudaSuccess) return attr;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(p.batch * kCluster));
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = kSmem;
  config.stream = stream;
  cudaLaunchAttribute cluster[1] = {};
  cluster[0].id = cudaLaunchAttributeClusterDimension;
  cluster[0].val.clusterDim.x = kCluster;
  cluster[0].val.clusterDim.y = 1;
  cluster[0].val.clusterDim.z = 1;
  config.attrs = cluster;
  config.numAttrs = kCluster > 1 ? 1 : 0;
  return cudaLaunchKernelEx(&config, SamplingKernel<kCluster>, p);
}

}  // namespace

cudaError_t LaunchSampling(const SamplingKernelParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.batch > (int64_t{1} << 31) - 1 || p.vocab <= 0 || p.vocab > kSamplingMaxVocab) return cudaErrorInvalidValue;
  // Small batches leave SMs idle with one CTA per row: on sm_90 a cluster of 2 or 4 CTAs per row
  // (one CTA per SM) shares a full-vocabulary walk's exponentials. The limits keep every
  // cluster resident at once on a 132-SM H100/H200 (GPCs of 16 or 18 SMs: 32 clusters of 4,
  // 66 of 2). A cluster launch the device refuses falls back to one CTA per row (same tokens).
  int device = 0, major = 0;
  if (const cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) return e;
  if (const cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device); e != cudaSuccess) {
    return e;
  }
  if (major >= 9 && p.batch <= 66) {
    const cudaError_t e = p.batch <= 32 ? LaunchWithCluster<4>(p, stream) : LaunchWithCluster<2>(p, stream);
    if (e == cudaSuccess) return cudaSuccess;
    (void)cudaGetLastError();  // the refused configuration; nothing was launched
  }
  return LaunchWithCluster<1>(p, stream);
}

}  // namespace peregrine::kernels
