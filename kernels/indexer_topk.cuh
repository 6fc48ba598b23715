// Top-k selection over each request's valid prefix of indexer scores (decode).
//
// For request b with n = num_entries[b] valid scores, selects K = min(k, n) entries: the
// largest scores, ties to the lower index (exactly the order "score descending, then index
// ascending"). indices[b, :K] holds the selected entry numbers in ascending order,
// indices[b, K:] is -1, and counts[b] = K. One launch, no host synchronisation.
//
// Method: a radix select on the unique 64-bit key (order-preserving score bits, inverted
// index bits), 11/11/10-bit digits from the top, each pass a shared-memory histogram over the
// elements still tied with the threshold.
// - Short rows (n <= kIndexerTopKShortRow, contexts up to 24K tokens): one CTA per request
//   reads the row once into shared memory and selects there; the picks are written in entry
//   order by a block scan.
// - Long rows: num_slices CTAs per request. Each starts streaming its slice into shared
//   memory (cp.async, two 64 KB buffers), estimates the same threshold score from a fixed
//   sample of the row (4,096 scores, a two-digit radix select in shared memory) while those
//   loads fly, then appends the entries of its slice scoring at or above it to the request's
//   candidate list in the workspace (one read of the row, spread over many SMs). The last CTA
//   of the request to finish selects exactly among the candidates and writes them in entry
//   order through a bitmap of the row in the freed buffers (rows up to 2^20 entries). The candidates hold the true top k whenever
//   there are at least k of them; when the estimate misses (fewer than k candidates, or more
//   than the list holds: heavy ties, all-equal rows) that CTA selects over the whole row
//   instead, so the result never depends on the estimate, only the time does.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

// Largest k the kernel is built for.
inline constexpr int kIndexerTopKMax = 2048;
// Rows up to this many entries are selected by one CTA in shared memory, with no workspace.
inline constexpr int kIndexerTopKShortRow = 6144;
// Candidates one long row's list holds (4 x the largest k).
inline constexpr int kIndexerTopKListCapacity = 4 * kIndexerTopKMax;
// Per request: [0] candidate counter, [1] arrived CTAs (both zero between calls), [2] the path
// the last call took (IndexerTopKPath), [3] its candidate count; then the candidates' ordered
// score bits [capacity] and entry numbers [capacity].
inline constexpr int kIndexerTopKWorkspaceInts = 4 + 2 * kIndexerTopKListCapacity;
// Largest number of CTAs per long request.
inline constexpr int kIndexerTopKMaxSlices = 64;

// Which selection served a long row (workspace[b][2] after the call; for tests and triage).
enum class IndexerTopKPath : int32_t {
  kNone = 0,        // short row, or not yet run
  kListShared = 1,  // candidates fit in shared memory: the fast path
  kListGlobal = 2,  // candidates selected from the list in global memory (L2)
  kWholeRow = 3,    // estimate missed: selected over the whole row by one CTA (slow, exact)
};

struct IndexerTopKParams {
  const float* scores;         // [B, score_stride]  (16-byte aligned rows)
  const int32_t* num_entries;  // [B]
  int32_t* indices;            // [B, k]
  int32_t* counts;             // [B]
  // [B, kIndexerTopKWorkspaceInts], zeroed once before the first call (every call leaves
  // the counters zero again). May be null when score_stride <= kIndexerTopKShortRow.
  int32_t* workspace;
  int batch = 0;
  int score_stride = 0;  // a multiple of 4
  int k = 0;
  int num_slices = 1;    // CTAs per long request, in [1, kIndexerTopKMaxSlices]
  // Benchmarks only (null otherwise): per CTA of the grid, kIndexerTopKPhases stamps of where
  // its time went (IndexerTopKPhase); stamps a CTA does not reach are left as they were.
  unsigned long long* phase_stamps = nullptr;
};

// Stamps per CTA in IndexerTopKParams::phase_stamps: the global timer (ns) at the start and
// the end, the SM's clock (cycles) at each boundary between them.
enum IndexerTopKPhase : int {
  kTopKStartNs = 0,
  kTopKStartCycles = 1,
  kTopKEstimatedCycles = 2,  // long rows: the threshold estimated from the sample
  kTopKGatheredCycles = 3,   // long rows: this slice's candidates appended and counted
  kTopKLoadedCycles = 4,     // the selecting CTA: candidates in place
  kTopKSelectedCycles = 5,   // the selecting CTA: the k picks found
  kTopKWrittenCycles = 6,    // the selecting CTA: picks written in entry order
  kTopKEndNs = 7,
  kTopKSampledCycles = 8,    // long rows: the estimate's sample in shared memory
};
inline constexpr int kIndexerTopKPhases = 9;

// CTAs per long request for a grid of about `num_ctas` CTAs (one per SM is the intent).
inline int IndexerTopKSlices(int batch, int num_ctas) {
  const int slices = batch > 0 ? num_ctas / batch : 1;
  return slices < 1 ? 1 : (slices > kIndexerTopKMaxSlices ? kIndexerTopKMaxSlices : slices);
}

cudaError_t LaunchIndexerTopK(const IndexerTopKParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
