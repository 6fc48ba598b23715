#include "kernels/indexer_topk.cuh"

#include <climits>
#include <cub/block/block_scan.cuh>

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
constexpr int kSmallRow = 2 * kCandidates;

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
  // Peaked score distributions put most of a warp's elements in a few bins: lanes that share
  // a bin add once, through their lowest lane, instead of serialising on one address.
  visit([&](uint64_t key, int) {
    const bool match = TopBits(key, bits) == prefix_top;
    const unsigned bin = match ? static_cast<unsigned>((key >> digit.shift) & mask) : 0xffffffffu;
    const unsigned peers = __match_any_sync(__activemask(), bin);
    if (match && static_cast<int>(threadIdx.x % 32) == __ffs(static_cast<int>(peers)) - 1)
      atomicAdd(&s.hist[bin], __popc(peers));
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

__global__ void __launch_bounds__(kThreads, 1) IndexerTopKKernel(const IndexerTopKParams p) {
  __shared__ TopKShared s;
  const int tid = static_cast<int>(threadIdx.x);
  const int b = static_cast<int>(blockIdx.x);
  const int k = p.k;
  int n = p.num_entries[b];
  n = n < 0 ? 0 : (n > p.score_stride ? p.score_stride : n);
  int32_t* indices = p.indices + static_cast<int64_t>(b) * k;

  if (n <= k) {
    for (int j = tid; j < k; j += kThreads) indices[j] = j < n ? j : -1;
    if (tid == 0) p.counts[b] = n;
    return;
  }

  if (tid == 0) {
    s.prefix = 0;
    s.bits = 0;
    s.needed = k;
    s.out_count = 0;
    s.candidate_count = 0;
  }
  __syncthreads();

  const float* row = p.scores + static_cast<int64_t>(b) * p.score_stride;
  if (n <= kSmallRow) {
    // One read into shared memory, radix passes there, then the picks in entry order by a
    // block scan (no sort): thread t owns entries [t * per, (t + 1) * per).
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
    if (tid == 0) p.counts[b] = k;
    return;
  }

  auto visit_global = [&](auto&& f) { ForEachScore(row, n, f); };
  auto visit_candidates = [&](auto&& f) { ForEachCandidate(s, f); };
  bool in_shared = false;
  for (int d = 0; d < kNumDigits; ++d) {
    const bool done = in_shared ? RadixPass(s, DigitAt(d), visit_candidates) : RadixPass(s, DigitAt(d), visit_global);
    if (done) break;
    if (!in_shared && s.found_count <= kCandidates) {
      // Take everything already above the threshold; keep the tied elements close.
      const int bits = s.bits;
      const uint64_t prefix_top = TopBits(s.prefix, bits);
      ForEachScore(row, n, [&](uint64_t key, int index) {
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
  {
    const int bits = s.bits;
    const uint64_t prefix_top = TopBits(s.prefix, bits);
    auto take = [&](uint64_t key, int index) {
      if (TopBits(key, bits) >= prefix_top) Emit(s, index);
    };
    if (in_shared) {
      ForEachCandidate(s, take);
    } else {
      ForEachScore(row, n, take);
    }
  }
  __syncthreads();

  // Ascending entry order: bitonic sort of the k picks, padded to a power of two.
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
  if (tid == 0) p.counts[b] = k;
}

}  // namespace

cudaError_t LaunchIndexerTopK(const IndexerTopKParams& p, cudaStream_t stream) {
  if (p.batch <= 0) return cudaSuccess;
  if (p.k < 1 || p.k > kIndexerTopKMax || p.score_stride % 4 != 0) return cudaErrorInvalidValue;
  IndexerTopKKernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace peregrine::kernels
