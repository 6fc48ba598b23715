// Page tables shared by several requests: request b reads row page_table_rows[b] of the
// table (its sequence's block table), or row b when no row map is given. A row outside the
// table reads as "no pages".
#pragma once

#include <cstdint>

#include "kernels/common/staged_entries.h"

namespace peregrine::kernels {

__device__ __forceinline__ const int32_t* PageTableRow(const int32_t* table, const int32_t* rows, int num_tables,
                                                       int max_pages, int b) {
  const int r = rows != nullptr ? rows[b] : b;
  return r >= 0 && r < num_tables ? table + static_cast<int64_t>(r) * max_pages : nullptr;
}

// Staged entries (staged_entries.h): request b's entry e is -1 when it is a pool entry, else
// its row of s.data (-2 when the staged table has no valid row for it: the entry is masked).
__device__ __forceinline__ int StagedRow(const StagedEntries& s, int b, int64_t e) {
  if (s.data == nullptr) return -1;
  const int first = s.first[b];
  if (e < first) return -1;
  const int64_t j = e - first;
  const int row = j < s.capacity ? s.table[static_cast<int64_t>(b) * s.capacity + j] : -2;
  return row >= 0 && row < s.num_rows ? row : -2;
}

}  // namespace peregrine::kernels
