// The sampling kernel: one block (or cluster) per row. Every floating-point step the host
// sampler takes is spelled with round-to-nearest intrinsics (no contraction into FMA), so
// weights, sums and the chosen token are bit-identical to src/sampling. See
// bench/sampling_gpu/NOTES.md.
#include "kernels/sampling.cuh"

#include <climits>

#include <cstdint>

#include "kernels/common/cluster.cuh"
#include "kernels/common/dependent_launch.cuh"
#include "kernels/sampling_detail.cuh"

namespace peregrine::kernels {

namespace {

using namespace sampling_detail;  // NOLINT: the kernel's own building blocks

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

// The walk inside one block of weights w[kWalkBlock] (shared, zero-padded), found in
// parallel. The host's walk adds the positive weights one by one to `cumulative` (a sequential
// double sum from c0) and stops at the first whose sum passes `target`, else at the last
// positive one. Here every thread sums its kPer weights, a block scan (another association)
// gives each weight's cumulative, and the first crossing is taken only where no rounding can
// move it. Both sums are of nonnegative terms, every partial sum of either holds only terms up
// to the weight in question, so each is within (adds in its longest chain) * 2^-53 of that exact
// cumulative: at most 1024 for the host's, ~25 here. A crossing whose cumulatives before and
// after sit more than 2^-40 (~9e-13) of `after` from the target on their sides is therefore
// the host's crossing too (the cumulatives only grow). Returns the index in the block, -1 when
// no weight is positive, or -2 when the margin is too close to call (the caller walks
// sequentially).
__device__ int32_t WalkBlockParallel(const float* w, double c0, double target, Shared& s) {
  constexpr int kPer = kWalkBlock / kThreads;
  static_assert(kWalkBlock % kThreads == 0 && kPer >= 1, "whole weights per thread");
  const int first_index = static_cast<int>(threadIdx.x) * kPer;
  double mine[kPer];
  double sum = 0.0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    mine[i] = static_cast<double>(w[first_index + i]);
    sum += mine[i];
  }
  // Exclusive scan of the thread sums in thread order (doubles in s.red).
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  double inc = sum;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const double o = __shfl_up_sync(0xffffffffu, inc, off);
    if (lane >= off) inc += o;
  }
  double* warp_sums = reinterpret_cast<double*>(s.red);
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  double base = c0;
  for (int v = 0; v < warp; ++v) base += warp_sums[v];
  __syncthreads();
  // The lanes before this one (not inc - sum: every partial sum below holds only terms at or
  // before the weight it is compared for, so its rounding is relative to that cumulative).
  double lanes_before = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) lanes_before = 0.0;
  double cumulative = base + lanes_before;
  int first = INT_MAX, last = -1;
  double before = 0.0, after = 0.0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    if (!(mine[i] > 0.0)) continue;
    const double next = cumulative + mine[i];
    if (first == INT_MAX && next > target) {
      first = first_index + i;
      before = cumulative;
      after = next;
    }
    last = first_index + i;
    cumulative = next;
  }
  const int crossing = -BlockReduce(-first, MaxI{}, s);  // the smallest (INT_MAX: none)
  const int last_positive = BlockReduce(last, MaxI{}, s);
  constexpr double kMargin = 0x1p-40;
  if (crossing != INT_MAX && first == crossing) {
    const double d = kMargin * after;
    s.found = after - d > target && before + d <= target ? crossing : -2;
  }
  if (crossing == INT_MAX && threadIdx.x == kThreads - 1) {
    // No crossing: the host walks to the last positive weight unless its total passes target.
    s.found = cumulative + kMargin * cumulative <= target ? last_positive : -2;
  }
  __syncthreads();
  const int32_t found = s.found;
  __syncthreads();
  return found;
}

// The ranks other than 0 of a cluster on a full-vocabulary-walk row: their share of the maximum
// and of the chains, between the barriers WalkFullVocab<kCluster> on rank 0 matches one for one.
template <int kCluster>
__device__ void WalkFullVocabPeer(const float* x, int n, float inv_t, RowPart<kCluster>& part, Shared& s) {
  const float max_logit = ClusterRowMax(x, part, s);
  SumChains(x, n, max_logit, inv_t, part.block_begin, part.block_end, s);
  ClusterSync();  // 2: every chain is summed
  ClusterSync();  // 3: rank 0 has copied them; this CTA's shared memory may go
}

// WalkFullVocab: per 1024-block FixedOrderSum (four chains, tail to the first), block masses
// added in order, then one block walked token by token. Every sum is the host's, in the host's
// order; only the loads are batched ahead of the dependent adds. With kCluster > 1 the chains
// are summed by the kCluster CTAs of the row's cluster (each a range of blocks, the same sums)
// and copied here through distributed shared memory.
template <int kCluster>
__device__ int32_t WalkFullVocab(const float* x, int n, float inv_t, double u, RowPart<kCluster>& part, Shared& s) {
  const int num_blocks = (n + kWalkBlock - 1) / kWalkBlock;
  const float max_logit = ClusterRowMax(x, part, s);
  Stamp(s, kSamplingPhase1Cycles);
  SumChains(x, n, max_logit, inv_t, part.block_begin, part.block_end, s);
  if constexpr (kCluster > 1) {
    ClusterSync();  // 2: every chain is summed
    for (int rank = 1; rank < kCluster; ++rank) {
      int begin, end;
      ChainRange(num_blocks, kCluster, rank, &begin, &end);
      const double* peer = ClusterPeer(s.chain, rank);
      for (int c = 4 * begin + static_cast<int>(threadIdx.x); c < 4 * end; c += kThreads) s.chain[c] = peer[c];
    }
    ClusterSync();  // 3: copied; the peers may go
  } else {
    __syncthreads();
  }
  Stamp(s, kSamplingPhase2Cycles);
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
  Stamp(s, kSamplingPhase3Cycles);
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
    const int32_t in_block = WalkBlockParallel(w, s.bucket_mass[0], s.bucket_mass[1], s);
    if (in_block != -2) {
      return in_block >= 0 ? begin + in_block : -1;
    }
    if (threadIdx.x == 0) {  // too close to call in parallel: the host's walk itself
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
// gather), each rank over its part, and rank 0 adds the ranks' totals and converts once: the
// same doubles as the host, bit for bit. The last bucket (weights below 2^-39) is summed as
// integers too, each weight truncated to a multiple of 2^-92: not the host's order or rounding
// (NOTES.md), but the same value however the row is split. Every rank gets the floor.
template <int kCluster>
__device__ float NucleusFloor(const float* x, float max_logit, float inv_t, float top_p, double* target_out,
                              RowPart<kCluster>& part, Shared& s) {
  static_assert(2 * kWarps * kNumBuckets * sizeof(uint32_t) <= sizeof(Shared::cand), "bucket counters in s.cand");
  uint32_t* const lo_all = reinterpret_cast<uint32_t*>(s.cand);      // [kWarps, kNumBuckets]
  uint32_t* const hi_all = lo_all + kWarps * kNumBuckets;            // [kWarps, kNumBuckets]
  for (int i = threadIdx.x; i < 2 * kWarps * kNumBuckets; i += kThreads) lo_all[i] = 0;
  if (threadIdx.x == 0) {
    s.tail_lo = 0;
    s.tail_hi = 0;
  }
  __syncthreads();
  uint32_t* const lo = lo_all + (threadIdx.x / 32) * kNumBuckets;
  uint32_t* const hi = hi_all + (threadIdx.x / 32) * kNumBuckets;
  unsigned long long tail = 0;  // < 2^53 per weight, at most 2^9 weights per thread
  ForRange(x, part.lo, part.hi, [&](int, float v) {
    const float w = TemperatureWeight(v, max_logit, inv_t);
    const uint32_t b = BucketOf(w);
    if (b == kNumBuckets - 1) {
      tail += __float2ull_rz(__fmul_rn(w, 0x1p92f));  // exact scaling, then truncation
      return;
    }
    const uint32_t bits = __float_as_uint(w);
    const uint32_t units = ((bits & 0x7FFFFFu) | 0x800000u) << ((bits >> 23) - BucketLowExponent(b));
    const uint32_t old = atomicAdd(&lo[b], units);
    if (old + units < old) atomicAdd(&hi[b], 1u);
  });
  if (tail != 0) {
    const unsigned long long old = atomicAdd(&s.tail_lo, tail);
    if (old + tail < old) atomicAdd(&s.tail_hi, 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < kNumBuckets - 1; b += kThreads) {
    uint64_t units = 0;  // below 2^18 * 2^25 = 2^43
    for (int w = 0; w < kWarps; ++w) {
      units += (static_cast<uint64_t>(hi_all[w * kNumBuckets + b]) << 32) | lo_all[w * kNumBuckets + b];
    }
    s.bucket_units[b] = units;
  }
  if constexpr (kCluster > 1) ClusterSync();  // every rank's sums are complete
  __syncthreads();
  if (part.rank == 0) {
    for (int b = threadIdx.x; b < kNumBuckets - 1; b += kThreads) {
      uint64_t units = 0;
#pragma unroll
      for (int rank = 0; rank < kCluster; ++rank) units += kCluster > 1 ? ClusterPeer(s.bucket_units, rank)[b] : s.bucket_units[b];
      // q = 2^(low exponent - 127 - 23), a normal double; the product is exact (units < 2^53).
      const double q = __longlong_as_double(
          static_cast<int64_t>(static_cast<int>(BucketLowExponent(static_cast<uint32_t>(b))) - 150 + 1023) << 52);
      s.bucket_mass[b] = __dmul_rn(static_cast<double>(units), q);
    }
    if (threadIdx.x == 0) {
      unsigned long long tail_lo = 0;
      uint32_t tail_hi = 0;
#pragma unroll
      for (int rank = 0; rank < kCluster; ++rank) {
        const unsigned long long add = kCluster > 1 ? *ClusterPeer(&s.tail_lo, rank) : s.tail_lo;
        tail_hi += (kCluster > 1 ? *ClusterPeer(&s.tail_hi, rank) : s.tail_hi) + (tail_lo + add < tail_lo ? 1u : 0u);
        tail_lo += add;
      }
      s.bucket_mass[kNumBuckets - 1] =
          __dmul_rn(__dadd_rn(__ull2double_rn(tail_lo), __dmul_rn(static_cast<double>(tail_hi), 0x1p64)), 0x1p-92);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
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
    *target_out = s.bucket_mass[0];
  }
  const int last_bucket = s.found;  // rank 0's; the others take rank 0's floor below
  const float floor = last_bucket + 1 < kNumBuckets
                          ? __uint_as_float(kOneBits - (static_cast<uint32_t>(last_bucket + 1) << kBucketShift))
                          : 0.0f;
  const float row_floor = __uint_as_float(static_cast<uint32_t>(ClusterCombine(part, __float_as_uint(floor), TakeFirst{}, s)));
  __syncthreads();
  return row_floor;
}

// Thread 0's walks add in the host's order, one dependent double add after another. The loads
// of kWalkBatch entries are issued before their adds, so a walk runs at the add's latency
// rather than a shared load's plus the add's (a nucleus of 2,049 tokens took ~470 us a row
// with a load in every step: NOTES, "Serial walks").
constexpr int kWalkBatch = 8;

// The sum of load(0), ..., load(count - 1) in order, kWalkBatch loads ahead of the adds.
template <typename Load>
__device__ __forceinline__ double SerialSum(int count, Load load) {
  double total = 0.0;
  for (int base = 0; base < count; base += kWalkBatch) {
    float v[kWalkBatch];
#pragma unroll
    for (int j = 0; j < kWalkBatch; ++j) v[j] = base + j < count ? load(base + j) : 0.0f;
#pragma unroll
    for (int j = 0; j < kWalkBatch; ++j) total = Add(total, static_cast<double>(v[j]));  // + 0.0: no change
  }
  return total;
}

// The length of the shortest prefix of w[0, count) whose sum in order reaches target (count
// when none does).
__device__ __forceinline__ int SerialPrefix(const float* w, int count, double target) {
  double cumulative = 0.0;
  int kept = count;
  for (int base = 0; base < count && kept == count; base += kWalkBatch) {
    float v[kWalkBatch];
#pragma unroll
    for (int j = 0; j < kWalkBatch; ++j) v[j] = base + j < count ? w[base + j] : 0.0f;
#pragma unroll
    for (int j = 0; j < kWalkBatch; ++j) {
      cumulative = Add(cumulative, static_cast<double>(v[j]));
      if (kept == count && base + j < count && cumulative >= target) kept = base + j + 1;
    }
  }
  return kept;
}

// A kept entry's key for the ascending-id walk: inverted id above, its weight's bits below
// (ids are unique, so the weight does not affect the order; 0 marks a dropped entry).
__device__ __forceinline__ uint64_t IdWeightKey(int32_t id, float w) {
  return (static_cast<uint64_t>(~static_cast<uint32_t>(id)) << 32) | __float_as_uint(w);
}

// The host's walk over keys[0, m) (IdWeightKey, ascending id): the first token whose cumulative
// weight passes u times the total, skipping weights <= 0; the last positive one if none does.
__device__ __forceinline__ int32_t SerialWalk(const uint64_t* keys, int m, double u) {
  auto weight = [](uint64_t key) { return __uint_as_float(static_cast<uint32_t>(key)); };
  const double total = SerialSum(m, [&](int i) { return weight(keys[i]); });
  const double target = __dmul_rn(u, total);
  double cumulative = 0.0;
  int32_t last_positive = 0;
  int32_t result = -1;
  for (int base = 0; base < m && result < 0; base += kWalkBatch) {
    uint64_t k[kWalkBatch];
#pragma unroll
    for (int j = 0; j < kWalkBatch; ++j) k[j] = base + j < m ? keys[base + j] : 0;
#pragma unroll
    for (int j = 0; j < kWalkBatch; ++j) {
      const float w = weight(k[j]);
      if (result < 0 && base + j < m && !(w <= 0.0f)) {
        cumulative = Add(cumulative, static_cast<double>(w));
        last_positive = static_cast<int32_t>(~static_cast<uint32_t>(k[j] >> 32));
        if (cumulative > target) result = last_positive;
      }
    }
  }
  return result >= 0 ? result : last_positive;
}

// From s.cand[0, count) (MoreLikely keys, any order unless `presorted`: most likely first): top-p prefix (when target >= 0 or
// top_p < 1 with the sum taken here), min-p filter, ascending-id walk. WalkKept's contract.
__device__ int32_t FinishKept(int count, float max_logit_or_nan, float inv_t, float top_p, double nucleus_target,
                              float min_p, double u, bool sorted_prefix, bool presorted, Shared& s) {
  if (!presorted) SortDescending(s, count);
  // Weights relative to the largest kept logit (top-k) or the row maximum (nucleus, min-p).
  const float max_logit = isnan(max_logit_or_nan) ? (count > 0 ? KeyLogit(s.cand[0]) : kNegInf) : max_logit_or_nan;
  for (int i = threadIdx.x; i < count; i += kThreads) s.cand_w[i] = TemperatureWeight(KeyLogit(s.cand[i]), max_logit, inv_t);
  __syncthreads();
  if (threadIdx.x == 0) {
    int kept = count;
    if (sorted_prefix) {
      double target = nucleus_target;
      if (target < 0.0) {  // top-k then top-p
        target = __dmul_rn(static_cast<double>(top_p), SerialSum(count, [&](int i) { return s.cand_w[i]; }));
      }
      kept = SerialPrefix(s.cand_w, count, target);
    }
    s.count = static_cast<uint32_t>(kept);
  }
  __syncthreads();
  const int kept = static_cast<int>(s.count);
  // Ascending id order; min-p drops entries (key 0 sorts last).
  uint32_t kept_here = 0;
  for (int i = threadIdx.x; i < count; i += kThreads) {
    const float w = s.cand_w[i];
    const bool keep = i < kept && !(w < min_p);
    s.cand[i] = keep ? IdWeightKey(KeyId(s.cand[i]), w) : 0;
    kept_here += keep ? 1u : 0u;
  }
  const int m = static_cast<int>(BlockReduce(kept_here, SumU{}, s));  // its barriers order the writes above
  SortDescending(s, kept);  // entries from `kept` on are all dropped (key 0)
  if (threadIdx.x == 0) s.found = SerialWalk(s.cand, m, u);
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
  StartAfterPredecessor();
  extern __shared__ __align__(16) unsigned char smem[];
  Shared& s = *reinterpret_cast<Shared*>(smem);
  const int64_t row = blockIdx.x / kCluster;
  const int n = p.vocab;
  float* x = p.logits + row * n;
  const SamplingRow r = p.rows[row];
  const int tid = threadIdx.x;
  RowPart<kCluster> part(n);
  if (tid == 0) {
    s.stamps = p.phase_stamps != nullptr && part.rank == 0 ? p.phase_stamps + row * kSamplingPhases : nullptr;
    if (s.stamps != nullptr) {
      for (int i = 0; i < kSamplingPhases; ++i) s.stamps[i] = 0;
      s.stamps[kSamplingStartNs] = GlobalNs();
    }
  }
  Stamp(s, kSamplingStartCycles);

  // 1. Raw logprobs, before any edit (raw_logprobs.cc; the normalizer to ~1e-7, not bit-exact).
  // Rank 0 alone, over the whole row: the sums do not depend on the cluster.
  double log_normalizer = 0.0;
  const bool wants_logprobs = r.num_top_logprobs >= 0;
  const int edit_begin = p.edit_offsets[row], edit_end = p.edit_offsets[row + 1];
  if (part.rank == 0) {
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
        RowPart<1> whole(n);
        got = GatherTop(x, static_cast<uint32_t>(num_top), 64,
                        [](int i, float v) { return MoreLikelyKey(Sanitized(v), i); }, whole, s);
        if (got > 0) SortDescending(s, got);
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
    if (edit_end > edit_begin) ApplyEdits(x, n, p.edits, p.edit_raw, edit_begin, edit_end);
  }
  if constexpr (kCluster > 1) ClusterSync();  // the edits are visible to every rank
  Stamp(s, kSamplingPreparedCycles);

  // 3. The token. Every rank passes over its part; rank 0 finishes alone.
  int32_t token = 0;
  bool overflow = false;
  const float inv_t = r.inv_temperature;
  const bool has_top_k = r.top_k > 0 && r.top_k < n;
  const bool has_top_p = r.top_p < 1.0f;
  const float min_p = fminf(r.min_p, 1.0f);
  int got = 0;
  float m = 0.0f;
  double target = -1.0;
  if (IsFullWalk(r, n)) {
    if (part.rank != 0) {
      if constexpr (kCluster > 1) WalkFullVocabPeer(x, n, inv_t, part, s);
      return;
    }
    token = WalkFullVocab(x, n, inv_t, r.u, part, s);
  } else {
    if (!(r.temperature > 0.0f)) {
      uint64_t best = 0;
      ForRange(x, part.lo, part.hi, [&](int i, float v) {
        const uint64_t k = MoreLikelyKey(Sanitized(v), i);
        best = k > best ? k : best;
      });
      best = ClusterCombine(part, BlockReduce(best, MaxU64{}, s), MaxU64{}, s);
      token = KeyId(best);
      Stamp(s, kSamplingPhase1Cycles);
    } else if (has_top_k) {
      // Valid logits (not NaN, not -inf) compared on the value alone: ties at the k-th kept.
      // The bounded gather usually suffices; radix passes when it cannot say.
      got = GatherTopBounded(x, static_cast<uint32_t>(r.top_k), part, s);
      if (got < 0)
        got = GatherTop(x, static_cast<uint32_t>(r.top_k), 32,
                        [](int i, float v) { return TopKValid(v) ? MoreLikelyKey(v, i) : uint64_t{0}; }, part, s);
      Stamp(s, kSamplingPhase2Cycles);
    } else {
      m = ClusterRowMax(x, part, s);
      Stamp(s, kSamplingPhase1Cycles);
      if (has_top_p) {
        const float floor = NucleusFloor(x, m, inv_t, r.top_p, &target, part, s);
        Stamp(s, kSamplingPhase2Cycles);
        got = GatherAbove(x, m, inv_t, floor, false, part, s);
      } else {
        got = GatherAbove(x, m, inv_t, min_p, true, part, s);
        Stamp(s, kSamplingPhase2Cycles);
      }
      Stamp(s, kSamplingPhase3Cycles);
    }
    if constexpr (kCluster > 1) {
      ClusterSync();  // no rank reads another's shared memory after this
      if (part.rank != 0) return;
    }
    if (r.temperature > 0.0f && got < 0) {
      overflow = true;
    } else if (r.temperature > 0.0f && has_top_k) {
      SortDescending(s, got);
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
      Stamp(s, kSamplingPhase3Cycles);
      token = FinishKept(count, __int_as_float(0x7fc00000), inv_t, r.top_p, -1.0, min_p, r.u, has_top_p, true, s);
    } else if (r.temperature > 0.0f) {
      token = FinishKept(got, m, inv_t, r.top_p, target, min_p, r.u, has_top_p, false, s);
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
    if (s.stamps != nullptr) {  // phases the path does not have repeat the last stamp
      s.stamps[kSamplingEndCycles] = clock64();
      for (int i = kSamplingPhase1Cycles; i < kSamplingEndCycles; ++i) {
        if (s.stamps[i] == 0) s.stamps[i] = s.stamps[i - 1];
      }
      s.stamps[kSamplingEndNs] = GlobalNs();
    }
  }
}

template <int kCluster>
cudaError_t LaunchWithCluster(const SamplingKernelParams& p, cudaStream_t stream) {
  constexpr size_t kSmem = sizeof(Shared);
  const cudaError_t attr = cudaFuncSetAttribute(SamplingKernel<kCluster>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                static_cast<int>(kSmem));
  if (attr != cudaSuccess) return attr;
  return LaunchDependent(SamplingKernel<kCluster>,
                         LaunchShape{dim3(static_cast<unsigned>(p.batch * kCluster)), dim3(kThreads), kSmem,
                                     dim3(kCluster, 1, 1)},
                         stream, p);
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
