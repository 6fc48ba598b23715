#include "kv_cache/kv_manager.h"

#include <algorithm>

#include "base/check.h"

namespace peregrine {

KvManager::KvManager(const KvCacheConfig& config)
    : config_(config), csa_pool_(config.num_csa_pages), hca_pool_(config.num_hca_pages) {
  for (int32_t s = config.num_slots - 1; s >= 0; --s) free_slots_.push_back(s);
}

int32_t KvManager::CsaPagesFor(int64_t num_tokens) const {
  if (!config_.has_csa) return 0;
  const int64_t entries = num_tokens / config_.csa_ratio;
  return static_cast<int32_t>((entries + config_.page_size - 1) / config_.page_size);
}

int32_t KvManager::HcaPagesFor(int64_t num_tokens) const {
  if (!config_.has_hca) return 0;
  const int64_t entries = num_tokens / config_.hca_ratio;
  return static_cast<int32_t>((entries + config_.page_size - 1) / config_.page_size);
}

void KvManager::admit(int64_t request) {
  PG_CHECK(can_admit(), "no free KV slot");
  PG_CHECK(!holds(request), "request admitted twice");
  RequestKv kv;
  kv.slot = free_slots_.back();
  free_slots_.pop_back();
  requests_.emplace(request, std::move(kv));
}

bool KvManager::can_append(int64_t request, int64_t num_new) const {
  const RequestKv& kv = get(request);
  const int64_t total = kv.num_tokens + num_new;
  const int32_t csa = CsaPagesFor(total) - static_cast<int32_t>(kv.csa_pages.size());
  const int32_t hca = HcaPagesFor(total) - static_cast<int32_t>(kv.hca_pages.size());
  return csa_pool_.can_allocate(std::max(csa, 0)) && hca_pool_.can_allocate(std::max(hca, 0));
}

void KvManager::append(int64_t request, int64_t num_new) {
  PG_CHECK(can_append(request, num_new), "append without room");
  RequestKv& kv = requests_.at(request);
  kv.num_tokens += num_new;
  const int32_t csa = CsaPagesFor(kv.num_tokens) - static_cast<int32_t>(kv.csa_pages.size());
  const int32_t hca = HcaPagesFor(kv.num_tokens) - static_cast<int32_t>(kv.hca_pages.size());
  if (csa > 0) csa_pool_.allocate(csa, kv.csa_pages);
  if (hca > 0) hca_pool_.allocate(hca, kv.hca_pages);
}

void KvManager::free(int64_t request) {
  auto it = requests_.find(request);
  if (it == requests_.end()) return;
  csa_pool_.free(it->second.csa_pages);
  hca_pool_.free(it->second.hca_pages);
  free_slots_.push_back(it->second.slot);
  requests_.erase(it);
}

const RequestKv& KvManager::get(int64_t request) const {
  auto it = requests_.find(request);
  PG_CHECK(it != requests_.end(), "unknown request");
  return it->second;
}

bool KvManager::fits_when_empty(int64_t num_tokens) const {
  return config_.num_slots > 0 && CsaPagesFor(num_tokens) <= csa_pool_.num_pages() &&
         HcaPagesFor(num_tokens) <= hca_pool_.num_pages();
}

double KvManager::usage() const {
  auto used = [](const PagePool& p) {
    return p.num_pages() ? 1.0 - static_cast<double>(p.num_free()) / p.num_pages() : 0.0;
  };
  return std::max(used(csa_pool_), used(hca_pool_));
}

int64_t KvManager::capacity_tokens() const {
  int64_t cap = INT64_MAX;
  if (config_.has_csa) cap = std::min(cap, static_cast<int64_t>(csa_pool_.num_pages()) * config_.page_size * config_.csa_ratio);
  if (config_.has_hca) cap = std::min(cap, static_cast<int64_t>(hca_pool_.num_pages()) * config_.page_size * config_.hca_ratio);
  return cap;
}

}  // namespace peregrine
