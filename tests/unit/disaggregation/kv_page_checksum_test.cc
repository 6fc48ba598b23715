// The CPU reference of the CUDA-IPC page checksum (kernels/kv_copy.cuh is checked against it
// on the GPU): what it detects and how pieces add up.
#include "runtime/kv_page_checksum.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace peregrine {
namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

TEST(KvPageChecksum, PiecesAddUpToThePage) {
  const std::vector<uint8_t> page = RandomBytes(8 * 1000, 1);
  const uint64_t whole = KvPageChecksum(page);
  for (size_t cut : {size_t{0}, size_t{8}, size_t{4000}, size_t{7992}, page.size()}) {
    const std::span<const uint8_t> all(page);
    EXPECT_EQ(KvPageChecksum(all.first(cut)) + KvPageChecksum(all.subspan(cut), cut / 8), whole) << cut;
  }
  EXPECT_EQ(KvPageChecksum({}), 0u);
}

TEST(KvPageChecksum, EveryFlippedBitIsSeen) {
  std::vector<uint8_t> page = RandomBytes(512, 2);
  const uint64_t base = KvPageChecksum(page);
  for (size_t i = 0; i < page.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      page[i] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_NE(KvPageChecksum(page), base) << "byte " << i << " bit " << bit;
      page[i] ^= static_cast<uint8_t>(1 << bit);
    }
  }
}

TEST(KvPageChecksum, MovedWordsAndZeroPagesDiffer) {
  std::vector<uint8_t> page = RandomBytes(64, 3);
  const uint64_t base = KvPageChecksum(page);
  std::swap_ranges(page.begin(), page.begin() + 8, page.begin() + 8);  // words 0 and 1 swapped
  EXPECT_NE(KvPageChecksum(page), base);
  // Zeros are not invisible: a zeroed page differs from a shorter or a shifted one.
  const std::vector<uint8_t> zeros(64, 0), fewer(56, 0);
  EXPECT_NE(KvPageChecksum(zeros), KvPageChecksum(fewer));
  EXPECT_NE(KvPageChecksum(zeros), 0u);
  EXPECT_NE(KvPageChecksum(fewer, 1), KvPageChecksum(fewer, 0));
}

}  // namespace
}  // namespace peregrine
