// Staged compressed entries (speculative draft trees, docs/decisions/0010-device-draft-trees.md):
// the entries a tree node sees that its own ancestors completed in the verify step are not in
// the pools yet. Request b's entries e >= first[b] are rows table[b * capacity + e - first[b]]
// of `data` instead of pool rows; a request with no staged entries has first[b] at or past its
// entry count. Host-includable (the kernels' params carry it; page_table.cuh reads it).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace peregrine::kernels {

struct StagedEntries {
  const void* data = nullptr;           // [num_rows, dim] bf16 (or FP8 rows where the reader says so); null: none
  const int32_t* first = nullptr;       // [B] the request's first staged entry number
  const int32_t* table = nullptr;       // [B, capacity] rows of data
  int capacity = 0;
  int num_rows = 0;
};

}  // namespace peregrine::kernels
