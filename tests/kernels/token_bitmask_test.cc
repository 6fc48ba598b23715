// The grammar-mask kernel vs ApplyTokenBitmask on the host: bit-identical rows (masked
// logits -inf, the others untouched, NaN and -inf inputs included), rows without a mask left
// as they are, awkward vocabularies (not a multiple of 32 or 4) and the launcher's checks.
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/ops/token_bitmask.h"
#include "gpu_test_util.h"
#include "sampling/token_bitmask.h"

namespace peregrine::testing {
namespace {

class TokenBitmaskTest : public GpuTest {};

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST_F(TokenBitmaskTest, MatchesTheHostOnEveryRow) {
  std::mt19937 rng(11);
  for (int64_t vocab : {int64_t{1}, int64_t{31}, int64_t{33}, int64_t{1027}, int64_t{129280}}) {
    const int64_t rows = 7, words = (vocab + 31) / 32, num_masks = 4;
    std::vector<float> logits = RandomNormal(rng, static_cast<size_t>(rows * vocab));
    logits[0] = std::numeric_limits<float>::quiet_NaN();
    if (vocab > 2) logits[2] = -std::numeric_limits<float>::infinity();
    std::vector<uint32_t> masks(static_cast<size_t>(num_masks * words));
    for (int64_t m = 0; m < num_masks; ++m) {
      for (int64_t w = 0; w < words; ++w) {
        uint32_t& word = masks[static_cast<size_t>(m * words + w)];
        switch (m) {
          case 0: word = 0; break;                     // nothing allowed (a terminated grammar's row)
          case 1: word = ~0u; break;                   // everything
          case 2: word = static_cast<uint32_t>(rng()); break;
          default: word = (rng() % 16 == 0) ? static_cast<uint32_t>(rng()) : 0u; break;  // sparse
        }
      }
    }
    const std::vector<int32_t> row_mask = {2, -1, 0, 3, 1, 2, -1};
    std::vector<float> want = logits;
    for (int64_t r = 0; r < rows; ++r) {
      if (row_mask[static_cast<size_t>(r)] < 0) continue;
      ApplyTokenBitmask(std::span<float>(want.data() + r * vocab, static_cast<size_t>(vocab)),
                        std::span<const uint32_t>(masks.data() + row_mask[static_cast<size_t>(r)] * words,
                                                  static_cast<size_t>(words)));
    }
    cuda::DeviceBuffer logits_d = Upload(logits), masks_d = Upload(masks), rows_d = Upload(row_mask);
    cuda::TokenBitmaskArgs a;
    a.logits = View(logits_d, DType::kF32, {rows, vocab});
    a.masks = View(masks_d, DType::kI32, {num_masks, words});
    a.row_mask = View(rows_d, DType::kI32, {rows});
    PG_ASSERT_OK(cuda::ApplyTokenBitmask(a, stream_.get()));
    const std::vector<float> got = Download<float>(logits_d, logits.size());
    int64_t masked = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_TRUE(SameBits(got[i], want[i])) << "vocab " << vocab << " element " << i << ": " << got[i] << " vs "
                                             << want[i];
      masked += std::isinf(want[i]) && !std::isinf(logits[i]);
    }
    EXPECT_GT(masked, 0) << vocab;
  }
}

TEST_F(TokenBitmaskTest, TheLauncherChecksShapes) {
  cuda::DeviceBuffer logits_d = Poisoned(64 * 4), masks_d = Poisoned(4), rows_d = Poisoned(4);
  cuda::TokenBitmaskArgs a;
  a.logits = View(logits_d, DType::kF32, {1, 64});
  a.masks = View(masks_d, DType::kI32, {1, 1});  // 32 ids < 64
  a.row_mask = View(rows_d, DType::kI32, {1});
  EXPECT_FALSE(cuda::ApplyTokenBitmask(a, stream_.get()).ok());
  a.masks = View(masks_d, DType::kF32, {1, 2});
  EXPECT_FALSE(cuda::ApplyTokenBitmask(a, stream_.get()).ok());
}

}  // namespace
}  // namespace peregrine::testing
