#include "kernels/indexer_topk.cuh"

#include <climits>
#include <cub/block/block_scan.cuh>

#include "kernels/common/mma.cuh"
#include "kernels/common/dependent_launch.cuh"

namespace peregrine::kernels {

namespace {

constexpr int kThreads = 1024;
constexpr int kBins = 2048;
// Tied elements gathered into shared memory once they fit.
constexpr int kCandidates = 3072;

// Digits of the 64-bit key from the most significant end: 11, 11, 10 bits of each half,
// i.e. (shift, width) = (53, 11), (42, 11), (32, 10), (21, 11), (10, 11), (0, 10).
struct Digit {
  int shift;
  int width;
};
constexpr int kNumDigits = 6;
__host__ __device__ constexpr Digit DigitAt(int d) {
  const int in_half = d % 3;
  return {(d < 3 ? 32 : 0) + (in_half == 0 ? 21 : (in_half == 1 ? 10 : 0)), in_half == 2 ? 10 : 11};
}
static_assert(DigitAt(0).shift == 53 && DigitAt(2).shift == 32 && DigitAt(2).width == 10 && DigitAt(5).shift == 0);

// Order-preserving unsigned image of a float (-0 counts as +0 so that equal scores tie).
__device__ __forceinline__ uint32_t OrderedBits(float score) {
  const uint32_t u = __float_as_uint(score + 0.0f);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Larger key = selected first: higher score, then lower index. Unique per element.
__device__ __forceinline__ uint64_t SelectionKey(uint32_t ordered, int index) {
  return (static_cast<uint64_t>(ordered) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(index));
}

__device__ __forceinline__ uint64_t TopBits(uint64_t key, int bits) { return bits == 0 ? 0 : key >> (64 - bits); }

// Rows up to this many entries are read once into shared memory and selected there.
constexpr int kSmallRow = kIndexerTopKShortRow;
static_assert(kSmallRow == 2 * kCandidates, "the short-row buffer shares the candidates' storage");

struct TopKShared {
  int hist[kBins];
  cub::BlockScan<int, kThreads>::TempStorage scan;
  union {
    struct {
      uint32_t ordered[kCandidates];
      int index[kCandidates];
    } candidates;                // long rows: the elements still tied with the threshold
    uint32_t row[kSmallRow];     // short rows: every entry's ordered score bits, by entry number
  } buf;
  int out[kIndexerTopKMax];
  unsigned long long prefix;  // decided high bits of the threshold key
  int bits;                   // how many high bits are decided
  int needed;                 // elements still to take among those tied with the prefix
  int found_bin;
  int found_above;
  int found_count;
  int out_count;
  int candidate_count;
  int is_last;  // long rows: this CTA is the request's last to arrive and selects
  int listed;   // long rows: candidates the request's CTAs appended
  int gathered;  // long rows: candidates this CTA's gather found (its staging in buf.candidates)
};

// Calls f(key, index) for each valid score of the row, 16-byte loads where possible.
template <typename F>
__device__ __forceinline__ void ForEachScore(const float* row, int n, F&& f) {
  const int tid = static_cast<int>(threadIdx.x);
  const int n4 = n / 4;
  const float4* row4 = reinterpret_cast<const float4*>(row);
  for (int i = tid; i < n4; i += kThreads) {
    const float4 v = row4[i];
    f(SelectionKey(OrderedBits(v.x), 4 * i), 4 * i);
    f(SelectionKey(OrderedBits(v.y), 4 * i + 1), 4 * i + 1);
    f(SelectionKey(OrderedBits(v.z), 4 * i + 2), 4 * i + 2);
    f(SelectionKey(OrderedBits(v.w), 4 * i + 3), 4 * i + 3);
  }
  for (int i = 4 * n4 + tid; i < n; i += kThreads) f(SelectionKey(OrderedBits(row[i]), i), i);
}

template <typename F>
__device__ __forceinline__ void ForEachCandidate(const TopKShared& s, F&& f) {
  for (int j = static_cast<int>(threadIdx.x); j < s.candidate_count; j += kThreads)
    f(SelectionKey(s.buf.candidates.ordered[j], s.buf.candidates.index[j]), s.buf.candidates.index[j]);
}

template <typename F>
__device__ __forceinline__ void ForEachShortRowEntry(const TopKShared& s, int n, F&& f) {
  for (int j = static_cast<int>(threadIdx.x); j < n; j += kThreads) f(SelectionKey(s.buf.row[j], j), j);
}

// One radix pass over the elements tied with the prefix: histogram of the next digit, then
// the bin holding the needed-th largest. Decides that digit and returns true when every
// element of that bin is taken (the selection is then exactly "key's decided bits >= prefix").
template <typename Visit>
__device__ bool RadixPass(TopKShared& s, const Digit digit, Visit&& visit) {
  const int tid = static_cast<int>(threadIdx.x);
  const int num_bins = 1 << digit.width;
  for (int i = tid; i < kBins; i += kThreads) s.hist[i] = 0;
  __syncthreads();
  const int bits = s.bits;
  const uint64_t prefix_top = TopBits(s.prefix, bits);
  const uint64_t mask = static_cast<uint64_t>(num_bins - 1);
  // One shared atomic per element, except where the whole warp falls in one bin (ties, flat
  // rows): then its first lane adds for all. A general match (__match_any_sync) per element
  // costs more than the contention it saves on the few crowded bins (NOTES: top-k).
  visit([&](uint64_t key, int) {
    const bool match = TopBits(key, bits) == prefix_top;
    const unsigned bin = match ? static_cast<unsigned>((key >> digit.shift) & mask) : 0xffffffffu;
    const unsigned active = __activemask();
    const int leader = __ffs(static_cast<int>(active)) - 1;
    const unsigned first = __shfl_sync(active, bin, leader);
    if (__all_sync(active, bin == first)) {
      if (match && static_cast<int>(threadIdx.x % 32) == leader) atomicAdd(&s.hist[bin], __popc(active));
    } else if (match) {
      atomicAdd(&s.hist[bin], 1);
    }
  });
  __syncthreads();

  // Thread t looks at bins num_bins-1-2t and num_bins-2-2t: counts above a bin are the
  // exclusive prefix sum in that descending order.
  const int hi0 = num_bins - 1 - 2 * tid;
  const int hi1 = hi0 - 1;
  const int c0 = hi0 >= 0 ? s.hist[hi0] : 0;
  const int c1 = hi1 >= 0 ? s.hist[hi1] : 0;
  int above = 0;
  cub::BlockScan<int, kThreads>(s.scan).ExclusiveSum(c0 + c1, above);
  const int needed = s.needed;
  if (hi0 >= 0 && above < needed && above + c0 >= needed) {
    s.found_bin = hi0;
    s.found_above = above;
    s.found_count = c0;
  }
  if (hi1 >= 0 && above + c0 < needed && above + c0 + c1 >= needed) {
    s.found_bin = hi1;
    s.found_above = above + c0;
    s.found_count = c1;
  }
  __syncthreads();
  if (tid == 0) {
    s.prefix |= static_cast<unsigned long long>(s.found_bin) << digit.shift;
    s.bits = bits + digit.width;
    s.needed = needed - s.found_above;
  }
  __syncthreads();
  return s.found_count == s.needed;
}

__device__ __forceinline__ void Emit(TopKShared& s, int index) {
  const int slot = atomicAdd(&s.out_count, 1);
  if (slot < kIndexerTopKMax) s.out[slot] = index;
}

// Selects the k largest keys among those `visit` yields into s.out (unordered). Expects
// prefix/bits/needed/out_count initialised (and, when in_shared, s.buf.candidates holding every
// element with candidate_count set). Radix passes over `visit` until the elements tied with the
// threshold fit in shared memory, then over those.
template <typename Visit>
__device__ void SelectLarge(TopKShared& s, bool in_shared, Visit&& visit) {
  auto visit_candidates = [&](auto&& f) { ForEachCandidate(s, f); };
  for (int d = 0; d < kNumDigits; ++d) {
    const bool done = in_shared ? RadixPass(s, DigitAt(d), visit_candidates) : RadixPass(s, DigitAt(d), visit);
    if (done) break;
    if (!in_shared && s.found_count <= kCandidates) {
      // Take everything already above the threshold; keep the tied elements close.
      const int bits = s.bits;
      const uint64_t prefix_top = TopBits(s.prefix, bits);
      visit([&](uint64_t key, int index) {
        const uint64_t top = TopBits(key, bits);
        if (top > prefix_top) {
          Emit(s, index);
        } else if (top == prefix_top) {
          const int j = atomicAdd(&s.candidate_count, 1);
          if (j < kCandidates) {
            s.buf.candidates.ordered[j] = static_cast<uint32_t>(key >> 32);
            s.buf.candidates.index[j] = index;
          }
        }
      });
      __syncthreads();
      in_shared = true;
    }
  }
  const int bits = s.bits;
  const uint64_t prefix_top = TopBits(s.prefix, bits);
  auto take = [&](uint64_t key, int index) {
    if (TopBits(key, bits) >= prefix_top) Emit(s, index);
  };
  if (in_shared) {
    ForEachCandidate(s, take);
  } else {
    visit(take);
  }
  __syncthreads();
}

// Writes the k picks of s.out in ascending entry order: bitonic sort padded to a power of two.
__device__ void WriteAscending(TopKShared& s, int k, int32_t* indices) {
  const int tid = static_cast<int>(threadIdx.x);
  int padded = 1;
  while (padded < k) padded <<= 1;
  for (int j = k + tid; j < padded; j += kThreads) s.out[j] = INT_MAX;
  __syncthreads();
  for (int size = 2; size <= padded; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < padded / 2; i += kThreads) {
        const int lo = 2 * stride * (i / stride) + i % stride;
        const int hi = lo + stride;
        const bool ascending = (lo & size) == 0;
        const int a = s.out[lo];
        const int c = s.out[hi];
        if ((a > c) == ascending) {
          s.out[lo] = c;
          s.out[hi] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int j = tid; j < k; j += kThreads) indices[j] = s.out[j];
}

// The same through a bitmap of entry numbers in `bitmap` (ceil(n / 32) words of shared
// memory): each pick sets its bit, then thread t owns a run of words and writes their set bits
// from its exclusive prefix count (one block scan instead of the sort's log^2 barriers).
__device__ void WriteAscendingBitmap(TopKShared& s, int k, int n, uint32_t* bitmap, int32_t* indices) {
  const int tid = static_cast<int>(threadIdx.x);
  const int words = (n + 31) / 32;
  for (int w = tid; w < words; w += kThreads) bitmap[w] = 0;
  __syncthreads();
  for (int j = tid; j < k; j += kThreads) atomicOr(&bitmap[s.out[j] >> 5], 1u << (s.out[j] & 31));
  __syncthreads();
  // Where each run is a multiple of 4 words it is read as 16-byte vectors (threads 32 bytes
  // apart would otherwise meet 8-way bank conflicts on every word). Runs are not rounded up to
  // 4 words for this: at 32K entries (one word a thread) that left three threads in four
  // without work and the rest with four times the run.
  const int per = (words + kThreads - 1) / kThreads;
  const int w0 = tid * per < words ? tid * per : words;
  const int w1 = w0 + per < words ? w0 + per : words;
  const uint4* vec = reinterpret_cast<const uint4*>(bitmap);
  const bool whole_vectors = per % 4 == 0 && (w1 - w0) % 4 == 0;  // the last run may be ragged
  int count = 0;
  if (whole_vectors) {
    for (int w = w0; w < w1; w += 4) {
      const uint4 q = vec[w / 4];
      count += __popc(q.x) + __popc(q.y) + __popc(q.z) + __popc(q.w);
    }
  } else {
    for (int w = w0; w < w1; ++w) count += __popc(bitmap[w]);
  }
  int position = 0;
  cub::BlockScan<int, kThreads>(s.scan).ExclusiveSum(count, position);
  if (count == 0) return;
  for (int w = w0; w < w1; ++w) {
    for (uint32_t bits = bitmap[w]; bits != 0; bits &= bits - 1) {
      if (position < k) indices[position] = 32 * w + __ffs(static_cast<int>(bits)) - 1;
      ++position;
    }
  }
}

// The short-row path: one read into shared memory, radix passes there, then the picks in
// entry order by a block scan (no sort): thread t owns entries [t * per, (t + 1) * per).
__device__ void SelectShortRow(TopKShared& s, const float* row, int n, int k, int32_t* indices) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int j = tid; j < n; j += kThreads) s.buf.row[j] = OrderedBits(row[j]);
  __syncthreads();
  auto visit_row = [&](auto&& f) { ForEachShortRowEntry(s, n, f); };
  for (int d = 0; d < kNumDigits; ++d)
    if (RadixPass(s, DigitAt(d), visit_row)) break;
  const int bits = s.bits;
  const uint64_t prefix_top = TopBits(s.prefix, bits);
  const int per = (n + kThreads - 1) / kThreads;
  const int first = tid * per;
  const int last = first + per < n ? first + per : n;
  int taken = 0;
  for (int j = first; j < last; ++j) taken += TopBits(SelectionKey(s.buf.row[j], j), bits) >= prefix_top;
  int position = 0;
  cub::BlockScan<int, kThreads>(s.scan).ExclusiveSum(taken, position);
  for (int j = first; j < last; ++j)
    if (TopBits(SelectionKey(s.buf.row[j], j), bits) >= prefix_top && position < k) indices[position++] = j;
}

__device__ __forceinline__ unsigned long long GlobalNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 records a phase boundary when the benchmark asked for stamps (the address is
// formed from the parameters each time: no register lives across the kernel for it).
__device__ __forceinline__ void StampCycles(const IndexerTopKParams& p, int phase) {
  if (p.phase_stamps != nullptr && threadIdx.x == 0)
    p.phase_stamps[static_cast<int64_t>(blockIdx.x) * kIndexerTopKPhases + phase] =
        static_cast<unsigned long long>(clock64());
}
__device__ __forceinline__ void StampNs(const IndexerTopKParams& p, int phase) {
  if (p.phase_stamps != nullptr && threadIdx.x == 0)
    p.phase_stamps[static_cast<int64_t>(blockIdx.x) * kIndexerTopKPhases + phase] = GlobalNs();
}

// Long rows: the threshold estimate. kSampleGroups float4 groups spread evenly over the row
// (the same ones in every CTA of the request, so every CTA finds the same threshold); the
// returned ordered score bits are at most the rank-th largest sample, with rank about twice
// the expected number of samples in the true top k plus a margin: the candidates (entries at or
// above it) then number about 2k + n / 256 and fall below k with negligible probability.
constexpr int kSampleGroups = kThreads;
constexpr int kSamples = 4 * kSampleGroups;
static_assert(kSamples <= kSmallRow, "the sample lives in the short-row buffer");
// Slices of a long row are at least this many entries (a smaller row uses fewer CTAs).
constexpr int kMinSliceEntries = 16384;

// This thread's sample group (loaded before the gather's copies are issued, so that it does
// not queue behind them).
__device__ __forceinline__ float4 LoadSample(const float* row, int n) {
  const int64_t n4 = n / 4;  // > kSampleGroups, since n > kSmallRow
  const int64_t group = static_cast<int64_t>(threadIdx.x) * n4 / kSampleGroups;
  return __ldg(reinterpret_cast<const float4*>(row) + group);
}

__device__ uint32_t EstimateThreshold(const IndexerTopKParams& p, TopKShared& s, float4 v, int n, int k) {
  const int tid = static_cast<int>(threadIdx.x);
  s.buf.row[4 * tid] = OrderedBits(v.x);
  s.buf.row[4 * tid + 1] = OrderedBits(v.y);
  s.buf.row[4 * tid + 2] = OrderedBits(v.z);
  s.buf.row[4 * tid + 3] = OrderedBits(v.w);
  if (tid == 0) {
    const int64_t expected = (static_cast<int64_t>(k) * kSamples + n - 1) / n;
    const int64_t rank = 2 * expected + 16;
    s.prefix = 0;
    s.bits = 0;
    s.needed = static_cast<int>(rank < kSamples ? rank : kSamples);
  }
  __syncthreads();
  StampCycles(p, kTopKSampledCycles);
  auto visit_sample = [&](auto&& f) { ForEachShortRowEntry(s, kSamples, f); };
  // Two digits (22 bits: sign, exponent, 13 mantissa bits) place the threshold within 2^-13
  // of the sample's value, which only adds the entries of that one bin as candidates.
  for (int d = 0; d < 2; ++d)
    if (RadixPass(s, DigitAt(d), visit_sample)) break;
  // Undecided low bits are zero: the threshold is the bottom of the chosen bin.
  const uint32_t threshold = static_cast<uint32_t>(s.prefix >> 32);
  __syncthreads();
  return threshold;
}

// The float whose ordered bits are `ordered` (OrderedBits' inverse, -0 aside): for non-NaN
// scores, OrderedBits(x) >= ordered exactly when x >= OrderedFloat(ordered).
__device__ __forceinline__ float OrderedFloat(uint32_t ordered) {
  return __uint_as_float((ordered & 0x80000000u) != 0 ? (ordered & 0x7fffffffu) : ~ordered);
}

// The gather streams its slice through shared memory: kGatherStages buffers of kV float4 per
// thread, filled by cp.async, so the next buffer's loads are in flight while this one is
// compared (each thread reads back only the 16-byte vectors it copied, so no barrier is
// needed between the copies and the reads). kV = 4 (two 64 KB buffers) where a CTA may have
// that much shared memory (sm_90: 227 KB), else 1 (two 16 KB buffers; sm_80, sm_86, sm_89).
constexpr int kGatherStages = 2;
constexpr int kWideVectors = 4;
constexpr int kNarrowVectors = 1;
template <int kV>
constexpr size_t kGatherSharedBytes = sizeof(float4) * kV * kGatherStages * kThreads;

// The kernel's dynamic shared memory: the gather's buffers (kGatherSharedBytes, long rows).
__device__ __forceinline__ float4* GatherStage() {
  extern __shared__ float4 gather_stage[];
  return gather_stage;
}

// A long row's slice: float4 groups [g0, g1) of the row, in buffers of kV * kThreads.
struct Slice {
  int g0 = 0, g1 = 0, num_chunks = 0;
};

template <int kV>
__device__ __forceinline__ Slice SliceOf(int n, int slice, int num_slices) {
  constexpr int kGatherChunk = kV * kThreads;
  const int n4 = n / 4;
  const int per = (n4 + num_slices - 1) / num_slices;
  Slice r;
  r.g0 = slice * per < n4 ? slice * per : n4;
  r.g1 = r.g0 + per < n4 ? r.g0 + per : n4;
  r.num_chunks = (r.g1 - r.g0 + kGatherChunk - 1) / kGatherChunk;
  return r;
}

// Starts the copies of chunk c of the slice into its buffer (none past the last chunk), and
// commits them as one group either way, so every thread's group count stays the same.
template <int kV>
__device__ __forceinline__ void IssueChunk(const float* row, const Slice& r, int c) {
  constexpr int kGatherChunk = kV * kThreads;
  const int tid = static_cast<int>(threadIdx.x);
  float4* stage = GatherStage();
  const float4* row4 = reinterpret_cast<const float4*>(row);
  if (c < r.num_chunks) {
    float4* buf = stage + (c % kGatherStages) * kGatherChunk;
#pragma unroll
    for (int u = 0; u < kV; ++u) {
      const int i = r.g0 + c * kGatherChunk + u * kThreads + tid;
      CpAsync16(buf + u * kThreads + tid, i < r.g1 ? row4 + i : row4, i < r.g1);
    }
  }
  CpAsyncCommit();
}

// Appends the entries of this CTA's slice with ordered score bits >= threshold to the list.
// They are staged in shared memory (buf.candidates, one shared atomic per warp and element
// slot that has any) and leave with one global atomic per CTA at the end: a global atomic
// per hit group would stall its warp for a round trip to L2 each time (~30 per warp at
// B = 64, 1M context: most of the gather's time). Hits past the staging's capacity go to the
// list directly; entries past the list's capacity are only counted. The caller has issued
// chunks [0, kGatherStages) (they load while it estimates the threshold). "Not below the
// bound" is the float form of ordered bits >= threshold for every non-NaN score; NaNs pass
// it, so the candidates are a superset of that set and the exact selection among them (by
// ordered bits) is unchanged. Loop trip counts are uniform across the CTA (full-warp ballots).
// Not inlined: inlined, the kernel spills (64 registers at 1024 threads).
template <int kV>
__device__ __noinline__ void GatherSlice(TopKShared& s, const float* row, int n, int slice, int num_slices,
                                         uint32_t threshold, int32_t* workspace) {
  constexpr int kGatherChunk = kV * kThreads;
  const int tid = static_cast<int>(threadIdx.x);
  const Slice r = SliceOf<kV>(n, slice, num_slices);
  const float4* stage = GatherStage();
  const int lane = tid % 32;
  int32_t* list_count = workspace;
  uint32_t* list_ordered = reinterpret_cast<uint32_t*>(workspace + 4);
  int32_t* list_index = workspace + 4 + kIndexerTopKListCapacity;
  auto append = [&](bool hit, float score, int index) {
    const unsigned hits = __ballot_sync(0xffffffffu, hit);
    if (hits == 0) return;
    const int leader = __ffs(static_cast<int>(hits)) - 1;
    const int count = __popc(hits);
    int base = 0;
    if (lane == leader) base = atomicAdd(&s.gathered, count);
    base = __shfl_sync(0xffffffffu, base, leader);
    // Lanes whose slot is past the staging go to the list (rare: warp-uniform branch).
    const int direct = base + count - kCandidates;
    int list_base = 0;
    if (direct > 0) {
      if (lane == leader) list_base = atomicAdd(list_count, direct < count ? direct : count);
      list_base = __shfl_sync(0xffffffffu, list_base, leader);
    }
    if (hit) {
      const int j = base + __popc(hits & ((1u << lane) - 1u));
      if (j < kCandidates) {
        s.buf.candidates.ordered[j] = OrderedBits(score);
        s.buf.candidates.index[j] = index;
      } else {
        const int g = list_base + (j - (base > kCandidates ? base : kCandidates));
        if (g < kIndexerTopKListCapacity) {
          list_ordered[g] = OrderedBits(score);
          list_index[g] = index;
        }
      }
    }
  };
  const float bound = OrderedFloat(threshold);
  for (int c = 0; c < r.num_chunks; ++c) {
    CpAsyncWait<kGatherStages - 1>();  // chunk c has landed; the next ones may be in flight
    const float4* buf = stage + (c % kGatherStages) * kGatherChunk;
#pragma unroll
    for (int u = 0; u < kV; ++u) {
      const int i = r.g0 + c * kGatherChunk + u * kThreads + tid;
      const bool valid = i < r.g1;
      const float4 v = buf[u * kThreads + tid];
      append(valid && !(v.x < bound), v.x, 4 * i);
      append(valid && !(v.y < bound), v.y, 4 * i + 1);
      append(valid && !(v.z < bound), v.z, 4 * i + 2);
      append(valid && !(v.w < bound), v.w, 4 * i + 3);
    }
    IssueChunk<kV>(row, r, c + kGatherStages);  // into the buffer this thread just read
  }
  CpAsyncWait<0>();
  if (slice == num_slices - 1) {
    for (int base = 4 * (n / 4); base < n; base += kThreads) {
      const int i = base + tid;
      const bool valid = i < n;
      const float v = valid ? row[i] : 0.0f;
      append(valid && !(v < bound), v, i);
    }
  }
  // The staged candidates to the list: one reservation for the CTA.
  __syncthreads();
  const int staged = s.gathered < kCandidates ? s.gathered : kCandidates;
  __shared__ int staged_base;
  if (tid == 0) staged_base = staged > 0 ? atomicAdd(list_count, staged) : 0;
  __syncthreads();
  for (int j = tid; j < staged; j += kThreads) {
    const int g = staged_base + j;
    if (g < kIndexerTopKListCapacity) {
      list_ordered[g] = s.buf.candidates.ordered[j];
      list_index[g] = s.buf.candidates.index[j];
    }
  }
}

template <int kV>
__global__ void __launch_bounds__(kThreads, 1) IndexerTopKKernel(const IndexerTopKParams p) {
  StartAfterPredecessor();
  __shared__ TopKShared s;
  const int tid = static_cast<int>(threadIdx.x);
  StampNs(p, kTopKStartNs);
  StampCycles(p, kTopKStartCycles);
  // Slice-major: the first B CTAs are slice 0 of each request (the only ones short rows use).
  const int b = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.batch));
  const int slice = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.batch));
  const int k = p.k;
  int n = p.num_entries[b];
  n = n < 0 ? 0 : (n > p.score_stride ? p.score_stride : n);
  int32_t* indices = p.indices + static_cast<int64_t>(b) * k;
  const float* row = p.scores + static_cast<int64_t>(b) * p.score_stride;

  if (n <= kSmallRow) {
    if (slice != 0) return;
    if (n <= k) {
      for (int j = tid; j < k; j += kThreads) indices[j] = j < n ? j : -1;
      if (tid == 0) p.counts[b] = n;
      return;
    }
    if (tid == 0) {
      s.prefix = 0;
      s.bits = 0;
      s.needed = k;
    }
    __syncthreads();
    SelectShortRow(s, row, n, k, indices);
    StampCycles(p, kTopKWrittenCycles);
    StampNs(p, kTopKEndNs);
    if (tid == 0) p.counts[b] = k;
    return;
  }

  // Long row: estimate, gather this slice's candidates, and the last CTA to arrive selects.
  const int wanted_slices = (n + kMinSliceEntries - 1) / kMinSliceEntries;
  const int num_slices = p.num_slices < wanted_slices ? p.num_slices : wanted_slices;
  if (slice >= num_slices) return;
  int32_t* workspace = p.workspace + static_cast<int64_t>(b) * kIndexerTopKWorkspaceInts;
  const float4 sample = LoadSample(row, n);
  {
    const Slice range = SliceOf<kV>(n, slice, num_slices);
#pragma unroll
    for (int c = 0; c < kGatherStages; ++c) IssueChunk<kV>(row, range, c);
  }
  if (tid == 0) s.gathered = 0;  // ordered before the gather by the estimate's barriers
  const uint32_t threshold = EstimateThreshold(p, s, sample, n, k);
  StampCycles(p, kTopKEstimatedCycles);
  GatherSlice<kV>(s, row, n, slice, num_slices, threshold, workspace);
  __threadfence();
  __syncthreads();
  StampCycles(p, kTopKGatheredCycles);
  if (tid == 0) {
    const bool is_last = atomicAdd(&workspace[1], 1) == num_slices - 1;
    s.is_last = is_last ? 1 : 0;
    if (is_last) {
      __threadfence();
      s.listed = atomicAdd(&workspace[0], 0);  // every slice's appends are counted
    }
  }
  __syncthreads();
  if (s.is_last == 0) {
    StampNs(p, kTopKEndNs);
    return;
  }
  __threadfence();
  const int listed = s.listed;

  const uint32_t* list_ordered = reinterpret_cast<const uint32_t*>(workspace + 4);
  const int32_t* list_index = workspace + 4 + kIndexerTopKListCapacity;
  IndexerTopKPath path;
  if (tid == 0) {
    s.prefix = 0;
    s.bits = 0;
    s.needed = k;
    s.out_count = 0;
    s.candidate_count = 0;
  }
  if (listed >= k && listed <= kCandidates) {
    path = IndexerTopKPath::kListShared;
    for (int j = tid; j < listed; j += kThreads) {
      s.buf.candidates.ordered[j] = __ldcg(list_ordered + j);
      s.buf.candidates.index[j] = __ldcg(list_index + j);
    }
    if (tid == 0) s.candidate_count = listed;
    __syncthreads();
    StampCycles(p, kTopKLoadedCycles);
    SelectLarge(s, /*in_shared=*/true, [](auto&&) {});
  } else if (listed >= k && listed <= kIndexerTopKListCapacity) {
    path = IndexerTopKPath::kListGlobal;
    __syncthreads();
    SelectLarge(s, /*in_shared=*/false, [&](auto&& f) {
      for (int j = tid; j < listed; j += kThreads) {
        const uint32_t ordered = __ldcg(list_ordered + j);
        const int index = __ldcg(list_index + j);
        f(SelectionKey(ordered, index), index);
      }
    });
  } else {
    path = IndexerTopKPath::kWholeRow;
    __syncthreads();
    SelectLarge(s, /*in_shared=*/false, [&](auto&& f) { ForEachScore(row, n, f); });
  }
  StampCycles(p, kTopKSelectedCycles);
  // The gather's buffers are free now (every copy waited for, and barriers since): a bitmap
  // of up to 8 bits per byte of them.
  if (n <= static_cast<int>(8 * kGatherSharedBytes<kV>))
    WriteAscendingBitmap(s, k, n, reinterpret_cast<uint32_t*>(GatherStage()), indices);
  else
    WriteAscending(s, k, indices);
  StampCycles(p, kTopKWrittenCycles);
  StampNs(p, kTopKEndNs);
  if (tid == 0) {
    p.counts[b] = k;
    workspace[0] = 0;
    workspace[1] = 0;
    workspace[2] = static_cast<int32_t>(path);
    workspace[3] = listed;
  }
}

}  // namespace

cudaError_t LaunchIndexerTopK(const IndexerTopKParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.k < 1 || p.k > kIndexerTopKMax || p.score_stride % 4 != 0) return cudaErrorInvalidValue;
  const bool has_long_rows = p.score_stride > kSmallRow;
  if (has_long_rows && (p.workspace == nullptr || p.num_slices < 1 || p.num_slices > kIndexerTopKMaxSlices))
    return cudaErrorInvalidValue;
  // Short rows only need one CTA per request.
  const int64_t grid = static_cast<int64_t>(p.batch) * (has_long_rows ? p.num_slices : 1);
  if (grid > INT_MAX) return cudaErrorInvalidValue;
  if (!has_long_rows) {
    return LaunchDependent(IndexerTopKKernel<kNarrowVectors>, LaunchShape{dim3(static_cast<unsigned>(grid)), dim3(kThreads)}, stream, p);
  }
  // None of these is a stream operation: all are allowed while a graph is being captured.
  int device = 0, optin = 0;
  cudaError_t e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
  if (e != cudaSuccess) return e;
  const bool wide = static_cast<size_t>(optin) >= sizeof(TopKShared) + kGatherSharedBytes<kWideVectors>;
  const auto kernel = wide ? IndexerTopKKernel<kWideVectors> : IndexerTopKKernel<kNarrowVectors>;
  const size_t dynamic_shared = wide ? kGatherSharedBytes<kWideVectors> : kGatherSharedBytes<kNarrowVectors>;
  e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic_shared));
  if (e != cudaSuccess) return e;
  return LaunchDependent(kernel, LaunchShape{dim3(static_cast<unsigned>(grid)), dim3(kThreads), dynamic_shared}, stream, p);
}

}  // namespace peregrine::kernels
