// PagePool: fixed-size pages of one kind of KV storage, handed out by id. Host bookkeeping
// only (the device or CPU backend owns the bytes). Free ids are kept sorted so allocations
// take the lowest ids, which keeps a request's pages contiguous whenever the pool allows.
#pragma once

#include <cstdint>
#include <set>
#include <vector>

namespace peregrine {

class PagePool {
 public:
  explicit PagePool(int32_t num_pages);

  int32_t num_pages() const { return num_pages_; }
  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  bool can_allocate(int32_t n) const { return n <= num_free(); }
  // Appends n page ids to `pages`; the caller must have checked can_allocate(n).
  // Prefers the run that continues `pages`' last id, then the lowest free ids.
  void allocate(int32_t n, std::vector<int32_t>& pages);
  // Returns pages to the pool (each id must be allocated).
  void free(const std::vector<int32_t>& pages);

 private:
  int32_t num_pages_;
  std::set<int32_t> free_;
};

}  // namespace peregrine
