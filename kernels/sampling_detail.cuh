// Device building blocks of the sampling kernel (kernels/sampling.cu; draft_candidates.cu takes its keys): the
// host sampler's arithmetic spelled with round-to-nearest intrinsics, ordered keys, block
// reductions and scans, the batched row pass, the bitonic sort, and the radix-select and
// threshold gathers. See bench/sampling_gpu/NOTES.md.
#pragma once

#include <cstdint>

#include "kernels/common/cluster.cuh"
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
  uint32_t hist_total[kHistBins];  // the histogram summed over the row's cluster
  double chain[kMaxChains];  // FixedOrderSum chains of the full-vocabulary walk
  double bucket_mass[kNumBuckets];
  uint64_t bucket_units[kNumBuckets];  // this CTA's bucket sums in units of each bucket's ulp
  unsigned long long tail_lo;          // this CTA's last-bucket sum in units of 2^-92: lo + 2^64 hi
  uint32_t tail_hi;
  uint64_t xchg[2];                    // cluster collectives' slots (ClusterCombine)
  uint64_t red[kWarps];
  uint32_t scan[kWarps];
  uint32_t count;
  uint32_t sel_bin;
  uint32_t sel_above;
  int32_t found;
  float cluster_max;  // this CTA's part of the row maximum, read by its cluster (full-vocabulary walk)
  int64_t* stamps;    // this row's SamplingPhase stamps, or null; thread 0 alone reads and writes it
};

// ---- phase stamps (benchmarks only; thread 0, when asked for) -------------------------------

__device__ __forceinline__ int64_t GlobalNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<int64_t>(t);
}
__device__ __forceinline__ void Stamp(Shared& s, int phase) {
  if (threadIdx.x == 0 && s.stamps != nullptr) s.stamps[phase] = clock64();
}

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
constexpr int kLoadBatch = 8;  // 4 and 16 measured no faster (NOTES.md, fourth version)
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

// ForEach over the elements [lo, hi) of the row x; fn gets the index in the row. lo is a multiple
// of 4 (RowPart's ranges are whole 1024-blocks), so the float4 path applies as for the row.
template <typename Fn>
__device__ __forceinline__ void ForRange(const float* x, int lo, int hi, Fn fn) {
  ForEach(x + lo, hi - lo, [&](int i, float v) { fn(lo + i, v); });
}

// ---- the row's cluster ----------------------------------------------------------------------
//
// With kCluster > 1 every pass over a row is split over the kCluster CTAs of its thread-block
// cluster, each over a range of whole 1024-blocks, and combined only in ways that do not depend
// on the split: maxima, integer counts and sums, and sets of candidates (sorted afterwards). So
// every value is the one a single CTA computes, and the tokens do not depend on the cluster size
// (nor therefore on the batch). Every CTA of the cluster calls the collectives below in the same
// order: the branches between them are taken on cluster-wide values alone.

// This CTA's part of the row: rank `rank` of kCluster takes 1024-blocks [begin, end).
__device__ __forceinline__ void ChainRange(int num_blocks, int cluster, int rank, int* begin, int* end) {
  const int per = (num_blocks + cluster - 1) / cluster;
  *begin = min(num_blocks, rank * per);
  *end = min(num_blocks, *begin + per);
}
template <int kCluster>
struct RowPart {
  int rank = 0;
  int block_begin = 0, block_end = 0;  // 1024-blocks
  int lo = 0, hi = 0;                  // elements
  int turn = 0;                        // ClusterCombine's slot
  __device__ explicit RowPart(int n) {
    rank = kCluster > 1 ? ClusterRank() : 0;
    ChainRange((n + kWalkBlock - 1) / kWalkBlock, kCluster, rank, &block_begin, &block_end);
    lo = min(n, block_begin * kWalkBlock);
    hi = min(n, block_end * kWalkBlock);
  }
};

// Every rank's `mine` (thread 0's value counts) combined by op, on every rank, in rank order.
// One cluster barrier. The slot alternates: it is written again only after the next
// collective's barrier, which every reader of this one passes after reading.
template <int kCluster, typename Op>
__device__ uint64_t ClusterCombine(RowPart<kCluster>& part, uint64_t mine, Op op, Shared& s) {
  if constexpr (kCluster == 1) {
    return mine;
  } else {
    const int slot = part.turn;
    part.turn ^= 1;
    if (threadIdx.x == 0) s.xchg[slot] = mine;
    ClusterSync();
    uint64_t r = *ClusterPeer(&s.xchg[slot], 0);
#pragma unroll
    for (int rank = 1; rank < kCluster; ++rank) r = op(r, *ClusterPeer(&s.xchg[slot], rank));
    return r;
  }
}
struct TakeFirst {
  __device__ uint64_t operator()(uint64_t a, uint64_t) const { return a; }
};
// Monotone in the float's value, -0 below +0 (a maximum of the raw bits, as a compare would
// keep either zero; the weights do not depend on the zero's sign).
__device__ __forceinline__ uint64_t MaxBits(float v) {
  const uint32_t b = __float_as_uint(v);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float FromMaxBits(uint64_t o) {
  const uint32_t b = static_cast<uint32_t>(o);
  return __uint_as_float((b & 0x80000000u) ? (b & 0x7FFFFFFFu) : ~b);
}

// The candidates every rank gathered into its s.cand[0, s.count) appended to rank 0's, in rank
// order. Returns the total (on every rank), or -1 when it exceeds kCap. Two cluster barriers:
// the counts and candidates are final; rank 0 has copied them.
template <int kCluster>
__device__ int ClusterCollect(RowPart<kCluster>& part, Shared& s) {
  if constexpr (kCluster == 1) {
    const uint32_t mine = s.count;  // may exceed kCap (the gathers count past it)
    __syncthreads();
    return mine <= static_cast<uint32_t>(kCap) ? static_cast<int>(mine) : -1;
  } else {
    ClusterSync();
    uint32_t counts[kCluster];
    uint32_t total = 0;
#pragma unroll
    for (int rank = 0; rank < kCluster; ++rank) {
      counts[rank] = *ClusterPeer(&s.count, rank);
      total += min(counts[rank], static_cast<uint32_t>(kCap) + 1);
    }
    if (part.rank == 0 && total <= static_cast<uint32_t>(kCap)) {
      uint32_t offset = counts[0];
#pragma unroll
      for (int rank = 1; rank < kCluster; ++rank) {
        const uint64_t* peer = ClusterPeer(s.cand, rank);
        for (uint32_t i = threadIdx.x; i < counts[rank]; i += kThreads) s.cand[offset + i] = peer[i];
        offset += counts[rank];
      }
    }
    ClusterSync();
    return total <= static_cast<uint32_t>(kCap) ? static_cast<int>(total) : -1;
  }
}

// Descending sort of s.cand[0, n). Up to kRankSortMax keys (most candidate sets: top-k's,
// the kept tokens) go by rank counting:
// thread i counts the keys above its own (equal keys, only the dropped zeros, by position),
// then writes its key at that rank; one pass of n shared loads per thread and two barriers,
// where the bitonic network below costs a barrier per stage (21 stages for 64 keys, 36 for 256).
constexpr int kRankSortMax = 256;
static_assert(kRankSortMax <= kThreads, "one thread per key");
__device__ inline void SortDescending(Shared& s, int n) {
  if (n <= kRankSortMax) {
    const int i = static_cast<int>(threadIdx.x);
    uint64_t mine = 0;
    int rank = 0;
    if (i < n) {
      mine = s.cand[i];
      for (int j = 0; j < n; ++j) {
        const uint64_t other = s.cand[j];
        rank += (other > mine || (other == mine && j < i)) ? 1 : 0;
      }
    }
    __syncthreads();
    if (i < n) s.cand[rank] = mine;
    __syncthreads();
    return;
  }
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
        }
      }
      __syncthreads();
    }
  }
}

// ---- radix select + gather ------------------------------------------------------------------

// Gathers into s.cand every element whose key (0: excluded) is among the k largest, compared
// on the top `bits` bits (ties at the k-th all kept), or every non-zero key when there are at
// most k. Histogram passes narrow the threshold until the gathered set fits kCap. Each rank
// passes over its part; the histograms are summed over the cluster, so every rank takes the
// same threshold, and rank 0 collects the candidates. Returns the number gathered, or -1 when
// even the exact threshold keeps more than kCap.
template <int kCluster, typename KeyFn>
__device__ int GatherTop(const float* x, uint32_t k, int bits, KeyFn key, RowPart<kCluster>& part, Shared& s) {
  uint64_t prefix = 0;   // the selected high bits so far
  int prefix_bits = 0;
  uint32_t above_total = 0;  // keys above the prefix's range (all gathered)
  uint64_t threshold = 1;    // gather keys >= threshold (compared on `bits` bits)
  bool first = true;
  for (;;) {
    const int d = min(kHistBits, bits - prefix_bits);
    for (int i = threadIdx.x; i < kHistBins; i += kThreads) s.hist[i] = 0;
    __syncthreads();
    ForRange(x, part.lo, part.hi, [&](int i, float v) {
      const uint64_t kk = key(i, v);
      if (kk == 0) return;
      if (prefix_bits > 0 && (kk >> (64 - prefix_bits)) != prefix) return;
      atomicAdd(&s.hist[(kk >> (64 - prefix_bits - d)) & ((1u << d) - 1)], 1u);
    });
    const uint32_t* hist = s.hist;
    if constexpr (kCluster > 1) {
      ClusterSync();  // every rank's histogram is complete
      for (int i = threadIdx.x; i < kHistBins; i += kThreads) {
        uint32_t sum = 0;
#pragma unroll
        for (int rank = 0; rank < kCluster; ++rank) sum += ClusterPeer(s.hist, rank)[i];
        s.hist_total[i] = sum;
      }
      hist = s.hist_total;
    }
    __syncthreads();
    // Thread t owns bins [4t, 4t + 4); suffix counts run from the top bin down.
    constexpr int kPer = kHistBins / kThreads;
    const int t = threadIdx.x;
    uint32_t local = 0;
    for (int b = 0; b < kPer; ++b) local += hist[t * kPer + b];
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
      const uint32_t h = hist[t * kPer + b];
      if (above < k && k <= above + h) {
        s.sel_bin = static_cast<uint32_t>(t * kPer + b);
        s.sel_above = above;
        s.found = 1;
      }
      above += h;
    }
    __syncthreads();
    const uint32_t bin = s.sel_bin, above_bin = s.sel_above;
    const uint32_t in_bin = hist[bin];
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
    if constexpr (kCluster > 1) ClusterSync();  // every rank has read this histogram
  }
  Stamp(s, kSamplingPhase1Cycles);
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  const int drop = 64 - bits;
  ForRange(x, part.lo, part.hi, [&](int i, float v) {
    const uint64_t kk = key(i, v);
    if (kk == 0 || (kk >> drop) < (threshold >> drop)) return;
    const uint32_t slot = atomicAdd(&s.count, 1u);
    if (slot < static_cast<uint32_t>(kCap)) s.cand[slot] = kk;
  });
  __syncthreads();
  return ClusterCollect(part, s);
}

// Valid logits for top-k: not NaN, not -inf.
__device__ __forceinline__ bool TopKValid(float v) { return v >= -3.402823466e38f; }

// Top-k's candidates in two plain passes when a lower bound on the k-th largest valid logit
// comes cheaply: each thread's largest valid logit, then t = the k-th largest of this CTA's
// thread maxima (k threads hold an element >= t, so at least k elements of the part, and of the
// row, are >= t: t is at most the row's k-th largest), the largest such t over the cluster, and
// one gather of every valid logit >= t. That set holds the k largest and every tie of the k-th,
// as GatherTop's does, so the caller's sort and tie count give the same kept set. On rows of a
// normal bulk the gather keeps about k per CTA of the cluster. Returns the number gathered
// (on every rank), or -1 when no CTA has k threads with a valid logit (k > kThreads included)
// or the set exceeds kCap; the caller then takes GatherTop.
template <int kCluster>
__device__ int GatherTopBounded(const float* x, uint32_t k, RowPart<kCluster>& part, Shared& s) {
  if (k > static_cast<uint32_t>(kThreads)) return -1;  // no k threads to bound by (k is the row's: every rank leaves)
  uint32_t best = 0;  // ordered bits of the thread's largest valid logit; 0 for none
  ForRange(x, part.lo, part.hi, [&](int, float v) {
    const uint32_t o = TopKValid(v) ? Ordered(v) : 0u;  // Ordered is >= 1 for every valid logit
    best = o > best ? o : best;
  });
  // The k-th largest thread maximum, bit by bit from the top (k threads at or above it).
  uint32_t bound = 0;
  for (int bit = 31; bit >= 0; --bit) {
    const uint32_t c = bound | (1u << bit);
    if (static_cast<uint32_t>(__syncthreads_count(best >= c)) >= k) bound = c;
  }
  bound = static_cast<uint32_t>(ClusterCombine(part, bound, MaxU64{}, s));
  Stamp(s, kSamplingPhase1Cycles);
  if (bound == 0) return -1;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  ForRange(x, part.lo, part.hi, [&](int i, float v) {
    if (!TopKValid(v) || Ordered(v) < bound) return;
    const uint32_t slot = atomicAdd(&s.count, 1u);
    if (slot < static_cast<uint32_t>(kCap)) s.cand[slot] = MoreLikelyKey(v, i);
  });
  __syncthreads();
  return ClusterCollect(part, s);
}

// Every element with TemperatureWeight > floor (>= when inclusive) into s.cand as MoreLikely
// keys, each rank over its part, collected on rank 0; -1 when more than kCap. The exponent
// pre-test only skips the exponential (truncation.cc). Once a rank's count is seen past kCap
// the row is an overflow whatever follows (counts only grow), so the remaining candidates skip
// the exponential and the contended atomic.
template <int kCluster>
__device__ int GatherAbove(const float* x, float max_logit, float inv_t, float floor, bool inclusive,
                           RowPart<kCluster>& part, Shared& s) {
  const float exponent_floor = floor > 0.0f ? logf(floor) - kExponentSlack : kNegInf;
  if (threadIdx.x == 0) s.count = 0;
  __syncthreads();
  const volatile uint32_t* const count_seen = &s.count;
  ForRange(x, part.lo, part.hi, [&](int i, float v) {
    if (!(v >= max_logit || __fmul_rn(__fsub_rn(v, max_logit), inv_t) >= exponent_floor)) return;
    if (*count_seen > static_cast<uint32_t>(kCap)) return;
    const float w = TemperatureWeight(v, max_logit, inv_t);
    if (!(w > floor || (inclusive && w == floor))) return;
    const uint32_t slot = atomicAdd(&s.count, 1u);
    if (slot < static_cast<uint32_t>(kCap)) s.cand[slot] = MoreLikelyKey(v, i);
  });
  __syncthreads();
  return ClusterCollect(part, s);
}

// Largest logit, NaN skipped (MaxLogit).
__device__ inline float RowMax(const float* x, int n, Shared& s) {
  float m = kNegInf;
  ForEach(x, n, [&](int, float v) { m = v > m ? v : m; });
  return BlockReduce(m, MaxF{}, s);
}
// The same over the cluster: each rank its part, then the maximum of the parts.
template <int kCluster>
__device__ float ClusterRowMax(const float* x, RowPart<kCluster>& part, Shared& s) {
  const float mine = RowMax(x + part.lo, part.hi - part.lo, s);
  return FromMaxBits(ClusterCombine(part, MaxBits(mine), MaxU64{}, s));
}

}  // namespace peregrine::kernels::sampling_detail
