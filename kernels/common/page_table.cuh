// Page tables shared by several requests: request b reads row page_table_rows[b] of the
// table (its sequence's block table), or row b when no row map is given. A row outside the
// table reads as "no pages".
#pragma once

#include <cstdint>

namespace peregrine::kernels {

__device__ __forceinline__ const int32_t* PageTableRow(const int32_t* table, const int32_t* rows, int num_tables,
                                                       int max_pages, int b) {
  const int r = rows != nullptr ? rows[b] : b;
  return r >= 0 && r < num_tables ? table + static_cast<int64_t>(r) * max_pages : nullptr;
}

}  // namespace peregrine::kernels
