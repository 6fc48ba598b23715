#include "kv_cache/page_pool.h"

#include "base/check.h"

namespace peregrine {

PagePool::PagePool(int32_t num_pages) : num_pages_(num_pages) {
  for (int32_t i = 0; i < num_pages; ++i) free_.insert(free_.end(), i);
}

void PagePool::allocate(int32_t n, std::vector<int32_t>& pages) {
  PG_CHECK(can_allocate(n), "page pool exhausted");
  for (int32_t i = 0; i < n; ++i) {
    auto it = free_.end();
    if (!pages.empty()) it = free_.find(pages.back() + 1);
    if (it == free_.end()) it = free_.begin();
    pages.push_back(*it);
    free_.erase(it);
  }
}

void PagePool::free(const std::vector<int32_t>& pages) {
  for (int32_t p : pages) {
    PG_CHECK(p >= 0 && p < num_pages_, "freeing a page id outside the pool");
    const bool inserted = free_.insert(p).second;
    PG_CHECK(inserted, "double free of a KV page");
  }
}

}  // namespace peregrine
