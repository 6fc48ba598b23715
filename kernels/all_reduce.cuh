// All-reduce (sum) among the GPUs of one host through buffers every rank maps from the others
// (CUDA IPC): the small-message path of tensor parallelism beside NCCL, inside CUDA graphs.
//
// Each rank owns, in its own device memory, an AllReduceSignals block (zeroed once) and a
// staging buffer of two halves; every rank maps the others'. All ranks launch the same call
// (same count, element type and algorithm) in the same order. Calls alternate between the
// staging halves, so a call never overwrites what a peer may still be reading of the one
// before it; each call meets the peers once (one-shot) or twice (two-shot), block by block.
//   one-shot: every rank copies its input into its staging, meets, and sums all ranks' staging;
//   two-shot: rank r sums slice r of all ranks' staging into its own, meets, and copies every
//             other slice from its owner (each byte crosses the links twice, not size-1 times).
// Sums run in f32 in rank order 0..size-1 (two-shot: on the slice's owner), so every rank gets
// the same bits. A peer that does not arrive within `timeout_ns` traps the kernel (a sticky
// launch failure the caller sees), instead of spinning forever.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace peregrine::kernels {

inline constexpr int kAllReduceMaxRanks = 8;
inline constexpr int kAllReduceBlocks = 36;  // every call's grid
inline constexpr int kAllReduceThreads = 512;

// One per rank, in that rank's memory, zeroed before first use.
struct AllReduceSignals {
  uint32_t arrived[2][kAllReduceBlocks][kAllReduceMaxRanks];  // [meeting][block][from rank]
  uint32_t calls[kAllReduceBlocks];                           // calls this rank's block has run
};

enum class AllReduceElement : int { kF32, kBF16 };
enum class AllReduceAlgorithm : int { kOneShot, kTwoShot };

struct AllReduceParams {
  void* buf = nullptr;  // [count] this rank's input, replaced by the sum (this rank's memory)
  void* staging[kAllReduceMaxRanks] = {};             // each rank's staging (this rank's at [rank])
  AllReduceSignals* signals[kAllReduceMaxRanks] = {};  // each rank's signals
  int64_t count = 0;
  int64_t staging_bytes = 0;  // of each staging buffer: two halves, each >= the message
  AllReduceElement element = AllReduceElement::kBF16;
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kOneShot;
  int rank = 0;
  int size = 1;
  uint64_t timeout_ns = 30'000'000'000ull;
};

// Bytes of one element; the message (count * bytes) must be a multiple of 16.
int AllReduceElementBytes(AllReduceElement element);

cudaError_t LaunchAllReduce(const AllReduceParams& p, cudaStream_t stream);

}  // namespace peregrine::kernels
