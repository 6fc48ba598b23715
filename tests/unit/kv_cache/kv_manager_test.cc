#include "kv_cache/kv_manager.h"

#include <gtest/gtest.h>

namespace peregrine {
namespace {

KvCacheConfig SmallConfig() {
  KvCacheConfig c;
  c.page_size = 4;       // 4 entries = 16 tokens of CSA, 512 tokens of HCA per page
  c.num_slots = 3;
  c.num_csa_pages = 8;
  c.num_hca_pages = 2;
  c.csa_ratio = 4;
  c.hca_ratio = 128;
  return c;
}

TEST(PagePoolTest, ContiguousRunsAndReuse) {
  PagePool pool(8);
  std::vector<int32_t> a, b;
  pool.allocate(3, a);
  pool.allocate(2, b);
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(b, (std::vector<int32_t>{3, 4}));
  pool.allocate(1, a);  // continues nothing adjacent (3 is taken): lowest free
  EXPECT_EQ(a.back(), 5);
  pool.free(b);
  pool.allocate(1, a);  // 6 continues the run 5
  EXPECT_EQ(a.back(), 6);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_FALSE(pool.can_allocate(4));
}

TEST(KvManagerTest, PagesFollowCompletedEntries) {
  KvManager kv(SmallConfig());
  kv.admit(7);
  EXPECT_TRUE(kv.can_append(7, 15));
  kv.append(7, 15);  // 3 CSA entries: one page; no HCA entry yet
  EXPECT_EQ(kv.get(7).csa_pages.size(), 1u);
  EXPECT_EQ(kv.get(7).hca_pages.size(), 0u);
  kv.append(7, 2);  // 17 tokens: 4 entries still one page
  EXPECT_EQ(kv.get(7).csa_pages.size(), 1u);
  kv.append(7, 111);  // 128 tokens: 32 CSA entries = 8 pages, 1 HCA entry
  EXPECT_EQ(kv.get(7).csa_pages.size(), 8u);
  EXPECT_EQ(kv.get(7).hca_pages.size(), 1u);
  EXPECT_DOUBLE_EQ(kv.usage(), 1.0);
  EXPECT_FALSE(kv.can_append(7, 4));
  kv.free(7);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.0);
  EXPECT_FALSE(kv.holds(7));
}

TEST(KvManagerTest, SlotsBoundAdmissionAndCapacity) {
  KvManager kv(SmallConfig());
  kv.admit(1);
  kv.admit(2);
  kv.admit(3);
  EXPECT_FALSE(kv.can_admit());
  kv.free(2);
  EXPECT_TRUE(kv.can_admit());
  EXPECT_EQ(kv.capacity_tokens(), 8 * 4 * 4);  // CSA pages bind before HCA
  EXPECT_TRUE(kv.fits_when_empty(128));
  EXPECT_FALSE(kv.fits_when_empty(132));
}

}  // namespace
}  // namespace peregrine
