// KV bookkeeping: block pool (contiguity, reference counts, LRU eviction of cached blocks),
// the prefix hash chain, and the manager's paging, snapshots and prefix reuse.
#include "kv_cache/kv_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace peregrine {
namespace {

// 16-token blocks taken once 4 tokens of the block exist (a ratio-4 kind).
KvLayout SmallLayout() {
  KvLayout l;
  l.block_tokens = 16;
  l.first_entry_tokens = 4;
  l.paged = {{"entries", 1000}, {"keys", 200}};
  l.per_request = {{"window", 50}};
  l.snapshot_bytes = 300;
  return l;
}

KvCacheConfig SmallConfig(bool caching, int32_t blocks = 8, int32_t snapshots = 4) {
  KvCacheConfig c;
  c.layout = SmallLayout();
  c.num_slots = 3;
  c.num_blocks = blocks;
  c.num_snapshots = snapshots;
  c.enable_prefix_caching = caching;
  return c;
}

std::vector<int32_t> Tokens(int n, int seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 31 + seed * 17) % 1000;
  return t;
}

TEST(BlockHashTest, ChainsOverTokensAndSalt) {
  const std::vector<int32_t> a = Tokens(16, 1), b = Tokens(16, 2);
  const BlockHash root = PrefixRoot("");
  EXPECT_EQ(ChainBlock(root, a), ChainBlock(root, a));
  EXPECT_NE(ChainBlock(root, a), ChainBlock(root, b));
  // The same block after different prefixes, or under another salt, is another key.
  EXPECT_NE(ChainBlock(ChainBlock(root, a), b), ChainBlock(ChainBlock(root, b), b));
  EXPECT_NE(ChainBlock(PrefixRoot("tenant-a"), a), ChainBlock(PrefixRoot("tenant-b"), a));
  EXPECT_NE(PrefixRoot(""), PrefixRoot(std::string_view("\0", 1)));
  // Token ids are hashed as whole 32-bit values (no byte-level aliasing between ids).
  EXPECT_NE(ChainBlock(root, std::vector<int32_t>{1, 256}), ChainBlock(root, std::vector<int32_t>{256, 1}));
}

TEST(BlockPoolTest, ContiguousRunsAndReuse) {
  BlockPool pool(8);
  std::vector<int32_t> a, b;
  for (int i = 0; i < 3; ++i) a.push_back(pool.allocate(a.empty() ? -1 : a.back()));
  for (int i = 0; i < 2; ++i) b.push_back(pool.allocate(b.empty() ? -1 : b.back()));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(b, (std::vector<int32_t>{3, 4}));
  a.push_back(pool.allocate(a.back()));  // 3 is taken: the lowest free
  EXPECT_EQ(a.back(), 5);
  for (int32_t id : b) pool.release(id);
  a.push_back(pool.allocate(a.back()));  // 6 continues the run 5
  EXPECT_EQ(a.back(), 6);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_FALSE(pool.can_allocate(4));
}

TEST(BlockPoolTest, CachedBlocksStayUntilEvictedLeastRecentlyReleasedFirst) {
  BlockPool pool(3);
  const BlockHash h0 = ChainBlock(PrefixRoot(""), Tokens(4, 0));
  const BlockHash h1 = ChainBlock(PrefixRoot(""), Tokens(4, 1));
  const int32_t x = pool.allocate(), y = pool.allocate(), z = pool.allocate();
  ASSERT_TRUE(pool.cache(x, h0));
  ASSERT_TRUE(pool.cache(y, h1));
  EXPECT_FALSE(pool.cache(z, h0));  // a second block with the same key stays unkeyed
  EXPECT_EQ(pool.num_free(), 0);
  pool.release(y);  // cached: evictable, still found
  pool.release(x);
  pool.release(z);  // unkeyed: free at once
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.find(h0), x);
  EXPECT_EQ(pool.find(h1), y);
  // A hit takes it out of the eviction order again.
  pool.acquire(x);
  EXPECT_EQ(pool.ref_count(x), 1);
  EXPECT_EQ(pool.num_free(), 2);
  // Free ids go first, then the least recently released cached block (y), never a held one.
  EXPECT_EQ(pool.allocate(), z);
  EXPECT_EQ(pool.allocate(), y);
  EXPECT_EQ(pool.find(h1), -1);
  EXPECT_EQ(pool.num_evictions(), 1);
  EXPECT_FALSE(pool.can_allocate(1));
  EXPECT_EQ(pool.find(h0), x);
}

TEST(KvManagerTest, BlocksFollowCompletedEntries) {
  KvManager kv(SmallConfig(false));
  const std::vector<int32_t> t = Tokens(200, 0);
  EXPECT_EQ(kv.admit(7, t), 0);
  kv.append(7, 3);  // no entry completed yet: no block
  EXPECT_EQ(kv.get(7).blocks.size(), 0u);
  kv.append(7, 1);
  EXPECT_EQ(kv.get(7).blocks.size(), 1u);
  kv.append(7, 15);  // 19 tokens: block 1 starts at 16, needs 4 tokens
  EXPECT_EQ(kv.get(7).blocks.size(), 1u);
  kv.append(7, 1);
  EXPECT_EQ(kv.get(7).blocks, (std::vector<int32_t>{0, 1}));
  EXPECT_TRUE(kv.can_append(7, 111));   // 131 tokens: blocks 0..7
  EXPECT_FALSE(kv.can_append(7, 112));  // 132: block 8 has an entry
  kv.append(7, 111);
  EXPECT_DOUBLE_EQ(kv.usage(), 1.0);
  kv.free(7);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.0);
  EXPECT_FALSE(kv.holds(7));
  EXPECT_EQ(kv.capacity_tokens(), 8 * 16);
  EXPECT_TRUE(kv.fits_when_empty(8 * 16 + 3));
  EXPECT_FALSE(kv.fits_when_empty(8 * 16 + 4));
}

TEST(KvManagerTest, SlotsBoundAdmission) {
  KvManager kv(SmallConfig(false));
  const std::vector<int32_t> t = Tokens(8, 0);
  kv.admit(1, t);
  kv.admit(2, t);
  kv.admit(3, t);
  EXPECT_FALSE(kv.can_admit());
  kv.free(2);
  EXPECT_TRUE(kv.can_admit());
  EXPECT_FALSE(kv.prefix_caching());
}

TEST(KvManagerTest, SnapshotsAtEveryBoundaryReached) {
  KvManager kv(SmallConfig(true));
  const std::vector<int32_t> t = Tokens(100, 0);
  kv.admit(1, t);
  std::vector<int32_t> snaps;
  kv.append(1, 10, &snaps);  // no boundary in (0, 10]
  EXPECT_TRUE(snaps.empty());
  kv.append(1, 38, &snaps);  // boundaries 16 and 32 in (10, 48]... and 48
  EXPECT_EQ(snaps.size(), 3u);
  for (int32_t s : snaps) EXPECT_GE(s, 0);
  kv.append(1, 1, &snaps);  // 49: none
  EXPECT_TRUE(snaps.empty());
}

// A second request with the same first 40 tokens shares the two full blocks and restores
// the snapshot at 32; its own tokens start there.
TEST(KvManagerTest, PrefixHitSharesBlocksAndRestoresTheDeepestSnapshot) {
  KvManager kv(SmallConfig(true));
  std::vector<int32_t> a = Tokens(40, 0);
  kv.admit(1, a);
  std::vector<int32_t> snaps;
  kv.append(1, 40, &snaps);
  ASSERT_EQ(snaps.size(), 2u);
  kv.commit(1, a);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  EXPECT_EQ(kv.num_cached_snapshots(), 2);

  std::vector<int32_t> b = a;
  b.resize(35);
  b.push_back(999);
  const int64_t hit = kv.admit(2, b);
  EXPECT_EQ(hit, 32);
  EXPECT_EQ(kv.get(2).num_tokens, 32);
  EXPECT_EQ(kv.get(2).blocks, (std::vector<int32_t>(kv.get(1).blocks.begin(), kv.get(1).blocks.begin() + 2)));
  const int32_t restore = kv.take_restore(2);
  EXPECT_EQ(restore, snaps[1]);
  EXPECT_EQ(kv.take_restore(2), -1);
  kv.append(2, 4, &snaps);  // its own third block
  EXPECT_EQ(kv.get(2).blocks.size(), 3u);
  EXPECT_NE(kv.get(2).blocks[2], kv.get(1).blocks[2]);
  kv.commit(2, b);

  // A prompt of exactly 32 tokens leaves its last token to compute: it hits 16.
  std::vector<int32_t> c(a.begin(), a.begin() + 32);
  EXPECT_EQ(kv.admit(3, c), 16);
  kv.free(3);
  // Another salt sees nothing.
  EXPECT_EQ(kv.admit(3, b, "tenant"), 0);
}

TEST(KvManagerTest, HitsNeedASnapshotAtTheirEnd) {
  // One snapshot: only the last boundary written keeps one.
  KvManager kv(SmallConfig(true, 8, 1));
  std::vector<int32_t> a = Tokens(40, 0);
  kv.admit(1, a);
  std::vector<int32_t> snaps;
  kv.append(1, 20, &snaps);
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_GE(snaps[0], 0);
  kv.append(1, 20, &snaps);  // the pool's one snapshot is held by the unkeyed boundary 16
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_EQ(snaps[0], -1);
  kv.commit(1, a);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  EXPECT_EQ(kv.num_cached_snapshots(), 1);
  EXPECT_EQ(kv.admit(2, a), 16);  // block 1 is cached, but no snapshot ends it
}

TEST(KvManagerTest, KeysWaitForKnownTokens) {
  KvManager kv(SmallConfig(true));
  std::vector<int32_t> a = Tokens(32, 0);
  kv.admit(1, std::span(a).first(31));
  std::vector<int32_t> snaps;
  kv.append(1, 32, &snaps);  // the 32nd token is being sampled
  kv.commit(1, std::span(a).first(31));
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  EXPECT_EQ(kv.num_cached_snapshots(), 1);
  kv.commit(1, a);  // it arrived
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  EXPECT_EQ(kv.num_cached_snapshots(), 2);
}

TEST(KvManagerTest, FreedPrefixesStayCachedUntilTheBlocksAreNeeded) {
  KvManager kv(SmallConfig(true, 4, 4));
  std::vector<int32_t> a = Tokens(64, 0), b = Tokens(64, 5);
  kv.admit(1, a);
  kv.append(1, 40, nullptr);
  kv.commit(1, a);
  kv.free(1);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.0);  // cached blocks count as free
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  // Another prompt takes the free block first, then evicts the deepest cached block first.
  kv.admit(2, b);
  kv.append(2, 20, nullptr);
  EXPECT_EQ(kv.num_cached_blocks(), 2);
  kv.append(2, 16, nullptr);
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  kv.free(2);
  // The first block is still there; a hit needs its snapshot, which was never written here
  // (no snapshots were asked for), so it does not hit.
  EXPECT_EQ(kv.admit(3, a), 0);
}

}  // namespace
}  // namespace peregrine

namespace peregrine {
namespace {

// A speculative step reserves room for drafts past a block boundary; when they are
// rejected, truncate gives the blocks and the boundary's snapshot back, and the next append
// across that boundary takes a snapshot again.
TEST(KvManagerTest, TruncateGivesBackWhatRejectedDraftsHeld) {
  KvManager kv(SmallConfig(true));
  const std::vector<int32_t> tokens = Tokens(40, 3);
  kv.admit(1, std::span(tokens).first(14));
  std::vector<int32_t> snaps;
  kv.append(1, 14, &snaps);
  EXPECT_EQ(kv.get(1).blocks.size(), 1u);
  const int32_t free_blocks = kv.num_free_blocks();
  kv.append(1, 1 + 7, &snaps);  // the decode token at 14 and 7 draft positions: to 22
  ASSERT_EQ(snaps.size(), 1u);  // the boundary at 16
  EXPECT_GE(snaps[0], 0);
  EXPECT_EQ(kv.get(1).blocks.size(), 2u);  // 22 >= 16 + 4
  EXPECT_EQ(kv.num_free_blocks(), free_blocks - 1);
  kv.truncate(1, 15);  // one draft accepted: 15 tokens computed
  EXPECT_EQ(kv.get(1).num_tokens, 15);
  EXPECT_EQ(kv.get(1).blocks.size(), 1u);
  EXPECT_EQ(kv.num_free_blocks(), free_blocks);
  EXPECT_TRUE(kv.get(1).written.empty());
  kv.truncate(1, 20);  // more than it holds: nothing
  EXPECT_EQ(kv.get(1).num_tokens, 15);
  kv.append(1, 3, &snaps);  // to 18: the boundary at 16 again
  ASSERT_EQ(snaps.size(), 1u);
  EXPECT_GE(snaps[0], 0);
  kv.commit(1, std::span(tokens).first(18));
  EXPECT_EQ(kv.num_cached_snapshots(), 1);
  kv.free(1);
}

}  // namespace
}  // namespace peregrine
