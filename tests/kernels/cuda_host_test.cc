// Host-side pieces of the CUDA backend, tested without a GPU: the caching allocator's
// bookkeeping over a fake raw allocator, the sparse attention planner's invariants, the
// launchers' tensor checker, and the MoE and fused launchers' refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/ops/hyper_connection.h"
#include "backend/cuda/ops/moe.h"
#include "backend/cuda/ops/rms_norm.h"
#include "backend/cuda/ops/sparse_attention_plan.h"
#include "backend/cuda/ops/tensor_check.h"
#include "kernels/hyper_connection.cuh"
#include "launcher_check_util.h"

namespace peregrine::cuda {
namespace {

using peregrine::testing::ExpectInvalidNaming;
using peregrine::testing::FakeDeviceTensor;

// Hands out fake addresses; can be told to fail.
class FakeRawAllocator final : public RawAllocator {
 public:
  Result<void*> Allocate(size_t bytes) override {
    if (fail_next > 0) {
      --fail_next;
      return ResourceExhausted("fake out of memory");
    }
    next_ += (bytes + 255) / 256 * 256 + 256;
    live[reinterpret_cast<void*>(next_)] = bytes;
    return reinterpret_cast<void*>(next_);
  }
  void Free(void* ptr) override {
    ASSERT_EQ(live.erase(ptr), 1u) << "freeing an unknown block";
  }
  std::map<void*, size_t> live;
  int fail_next = 0;

 private:
  uintptr_t next_ = 1 << 20;
};

TEST(CachingAllocatorTest, SizeClasses) {
  EXPECT_EQ(CachingAllocator::SizeClass(1), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(512), 512u);
  EXPECT_EQ(CachingAllocator::SizeClass(513), 1024u);
  EXPECT_EQ(CachingAllocator::SizeClass(1 << 20), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::SizeClass((1 << 20) + 1), size_t{2} << 20);
  EXPECT_EQ(CachingAllocator::SizeClass((5 << 20) + 1), size_t{6} << 20);
}

TEST(CachingAllocatorTest, ReusesFreedBlocksAndCountsEverything) {
  FakeRawAllocator raw;
  {
    CachingAllocator allocator(raw);
    void* first = nullptr;
    {
      auto a = allocator.Allocate(1000);
      ASSERT_TRUE(a.ok());
      first = a->data();
      EXPECT_EQ(a->capacity(), 1024u);
      EXPECT_EQ(allocator.stats().bytes_in_use, 1024u);
    }
    EXPECT_EQ(allocator.stats().bytes_cached, 1024u);
    auto b = allocator.Allocate(700);  // same class: the cached block comes back
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->data(), first);
    EXPECT_EQ(allocator.stats().num_cache_hits, 1);
    EXPECT_EQ(allocator.stats().num_raw_allocations, 1);
    auto c = allocator.Allocate(3 << 20);
    ASSERT_TRUE(c.ok());
    EXPECT_EQ(allocator.stats().peak_bytes_in_use, 1024u + (4u << 20));
    DeviceBuffer moved = std::move(b).value();
    EXPECT_EQ(moved.data(), first);
    auto empty = allocator.Allocate(0);
    ASSERT_TRUE(empty.ok());
    EXPECT_TRUE(empty->empty());
  }
  EXPECT_TRUE(raw.live.empty()) << "blocks leaked past the allocator";
}

TEST(CachingAllocatorTest, TrimsCacheWhenTheSourceRunsOut) {
  FakeRawAllocator raw;
  CachingAllocator allocator(raw);
  { auto a = allocator.Allocate(4096); }
  EXPECT_EQ(allocator.stats().bytes_cached, 4096u);
  raw.fail_next = 1;  // the first attempt fails, the one after trimming succeeds
  auto b = allocator.Allocate(8192);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(allocator.stats().bytes_cached, 0u);
  raw.fail_next = 2;
  auto c = allocator.Allocate(1 << 24);
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(allocator.stats().bytes_in_use, 8192u);
}

// Every tile of every request covered once, in order; CTA loads balanced; slots consistent.
// `whole`: the batch-invariant plan, each non-empty request one direct segment, a CTA over its
// share by less than its last request.
void CheckPlan(const std::vector<int64_t>& rows, int num_ctas, int max_batch, bool whole = false) {
  SCOPED_TRACE("B=" + std::to_string(rows.size()) + " ctas=" + std::to_string(num_ctas) + (whole ? " whole" : ""));
  constexpr int64_t kBlockN = kernels::kSparseAttentionBlockN;
  const auto layout = SparseAttentionLayout(num_ctas, max_batch);
  std::vector<int32_t> s(static_cast<size_t>(layout.num_ints()), 77);
  ASSERT_TRUE(PlanSparseAttention(rows, layout, s, whole).ok());
  int64_t total_tiles = 0, max_tiles = 0;
  for (int64_t r : rows) {
    total_tiles += (r + kBlockN - 1) / kBlockN;
    max_tiles = std::max(max_tiles, (r + kBlockN - 1) / kBlockN);
  }
  const int64_t per_cta = std::max<int64_t>(1, (total_tiles + num_ctas - 1) / num_ctas);
  std::vector<int64_t> next_row(rows.size(), 0);
  std::vector<int> segments_of(rows.size(), 0);
  std::set<int> slots;
  EXPECT_EQ(s[0], 0);
  for (int c = 0; c < num_ctas; ++c) {
    ASSERT_LE(s[static_cast<size_t>(c)], s[static_cast<size_t>(c) + 1]);
    int64_t tiles = 0;
    for (int g = s[static_cast<size_t>(c)]; g < s[static_cast<size_t>(c) + 1]; ++g) {
      const int32_t* seg = s.data() + layout.segments_offset() + 4 * g;
      const auto b = static_cast<size_t>(seg[0]);
      ASSERT_LT(b, rows.size());
      EXPECT_EQ(seg[1], next_row[b]) << "segment " << g << " does not continue request " << b;
      EXPECT_GT(seg[2], seg[1]);
      EXPECT_EQ(seg[1] % kBlockN, 0);
      EXPECT_LE(seg[2], rows[b]);
      next_row[b] = seg[2];
      tiles += (seg[2] - seg[1] + kBlockN - 1) / kBlockN;
      ++segments_of[b];
      if (seg[3] >= 0) {
        EXPECT_TRUE(slots.insert(seg[3]).second) << "slot used twice";
      }
    }
    EXPECT_LE(tiles, whole ? per_cta + max_tiles - 1 : per_cta);
  }
  const int32_t* combine = s.data() + layout.combine_offset();
  std::set<int32_t> combined(combine + 1, combine + 1 + combine[0]);
  EXPECT_EQ(static_cast<int32_t>(combined.size()), combine[0]) << "a request listed twice for the combine";
  for (size_t b = 0; b < rows.size(); ++b) {
    EXPECT_EQ(next_row[b], rows[b]) << "request " << b << " not fully covered";
    if (whole) {
      EXPECT_EQ(segments_of[b], rows[b] > 0 ? 1 : 0) << "request " << b << " split";
    }
    const int32_t* info = s.data() + layout.requests_offset() + 2 * b;
    if (segments_of[b] == 1) {
      EXPECT_EQ(info[1], -1);
      EXPECT_EQ(combined.count(static_cast<int32_t>(b)), 0u) << "direct request " << b << " listed for the combine";
    } else {
      EXPECT_EQ(info[1], segments_of[b]);
      EXPECT_EQ(combined.count(static_cast<int32_t>(b)), 1u) << "request " << b << " missing from the combine list";
      for (int j = 0; j < info[1]; ++j) EXPECT_TRUE(slots.count(info[0] + j)) << "request " << b;
    }
  }
  EXPECT_LE(static_cast<int>(slots.size()), layout.max_segments);
}

TEST(SparseAttentionPlanTest, Invariants) {
  CheckPlan({640}, 132, 1);
  CheckPlan({640}, 1, 4);
  CheckPlan({0}, 132, 1);
  CheckPlan({8320}, 132, 1);
  CheckPlan(std::vector<int64_t>(128, 640), 132, 128);
  CheckPlan(std::vector<int64_t>(64, 640), 132, 64);
  CheckPlan(std::vector<int64_t>(16, 640), 132, 16);
  CheckPlan({1, 0, 63, 64, 65, 129, 0, 2049, 7}, 7, 12);
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    std::uniform_int_distribution<int> batch(1, 40), ctas(1, 140), len(0, 3000);
    std::vector<int64_t> rows(static_cast<size_t>(batch(rng)));
    for (int64_t& r : rows) r = len(rng) < 300 ? 0 : len(rng);
    CheckPlan(rows, ctas(rng), static_cast<int>(rows.size()) + 2);
    CheckPlan(rows, ctas(rng), static_cast<int>(rows.size()) + 2, true);
  }
}

// The batch-invariant plan never splits a request: one long request runs on one CTA, and a
// request's segment is the same whatever the batch around it.
TEST(SparseAttentionPlanTest, WholeRequestsNeverSplit) {
  CheckPlan({8320}, 132, 1, true);
  CheckPlan({640}, 1, 4, true);
  CheckPlan({1, 0, 63, 64, 65, 129, 0, 2049, 7}, 7, 12, true);
  CheckPlan(std::vector<int64_t>(128, 640), 132, 128, true);
  const auto single = SparseAttentionLayout(132, 1);
  std::vector<int32_t> t(static_cast<size_t>(single.num_ints()));
  ASSERT_TRUE(PlanSparseAttention(std::vector<int64_t>{128 + 8192}, single, t, true).ok());
  EXPECT_EQ(t[static_cast<size_t>(single.requests_offset() + 1)], -1);  // direct
  EXPECT_EQ(t[1], 1);  // CTA 0 holds the one segment
}

TEST(SparseAttentionPlanTest, WholeRequestsAtLargeBatchSplitsAtSmallBatch) {
  const auto layout = SparseAttentionLayout(132, 128);
  std::vector<int32_t> s(static_cast<size_t>(layout.num_ints()));
  ASSERT_TRUE(PlanSparseAttention(std::vector<int64_t>(128, 640), layout, s).ok());
  for (int b = 0; b < 128; ++b) EXPECT_EQ(s[static_cast<size_t>(layout.requests_offset() + 2 * b + 1)], -1);
  const auto single = SparseAttentionLayout(132, 1);
  std::vector<int32_t> t(static_cast<size_t>(single.num_ints()));
  ASSERT_TRUE(PlanSparseAttention(std::vector<int64_t>{128 + 8192}, single, t).ok());
  EXPECT_EQ(t[static_cast<size_t>(single.requests_offset() + 1)], 130);  // 130 tiles, one per CTA
}

// The mHC collapse's batch-invariant split is batch 1's at every batch size (so a row's sums
// run in one order), and its workspace bound covers every split row and stays monotone.
TEST(HyperConnectionSplitTest, BatchInvariantSplitIgnoresTheBatch) {
  for (const int64_t k : {int64_t{512}, int64_t{1000}, int64_t{4 * 4096}, int64_t{8 * 8192}}) {
    const kernels::HcSplit one = kernels::HcSplitFor(1, k);
    int64_t last = 0;
    bool default_split_changes = false;
    for (const int64_t n : {int64_t{1}, int64_t{2}, int64_t{33}, int64_t{64}, int64_t{1000}, int64_t{8192}}) {
      const kernels::HcSplit s = kernels::HcSplitOf(n, k, true);
      EXPECT_EQ(s.num_splits, one.num_splits) << "k " << k << " n " << n;
      EXPECT_EQ(s.units_per_split, one.units_per_split) << "k " << k << " n " << n;
      default_split_changes |= kernels::HcSplitOf(n, k, false).num_splits != one.num_splits;
      const int64_t mixes = 24;
      const int64_t floats = kernels::HcWorkspaceFloatsOf(n, mixes, k, true);
      EXPECT_GE(floats, (mixes + 1) * n * s.num_splits);
      EXPECT_GE(floats, last);
      last = floats;
    }
    // Where the default split moves with the batch, the invariant one is what keeps it fixed.
    if (one.num_splits > 1) {
      EXPECT_TRUE(default_split_changes) << "k " << k;
    }
  }
}

TEST(SparseAttentionPlanTest, RejectsBadInput) {
  const auto layout = SparseAttentionLayout(4, 2);
  std::vector<int32_t> s(static_cast<size_t>(layout.num_ints()));
  EXPECT_FALSE(PlanSparseAttention(std::vector<int64_t>{1, 2, 3}, layout, s).ok());  // batch over max
  EXPECT_FALSE(PlanSparseAttention(std::vector<int64_t>{-1}, layout, s).ok());
  std::vector<int32_t> short_schedule(3);
  EXPECT_FALSE(PlanSparseAttention(std::vector<int64_t>{1}, layout, short_schedule).ok());
}

TEST(TensorCheckerTest, BindsNamedDimensionsAndNamesTheCulprit) {
  std::vector<float> storage(4096);
  TensorChecker check("op");
  Dim b("B"), h("H"), d("D", 64);
  const Tensor q = Tensor::Contiguous(storage.data(), DType::kF32, {3, 8, 64}, Device::kCuda);
  EXPECT_TRUE(check.Check("q", q, DType::kF32, {&b, &h, &d}).ok());
  EXPECT_EQ(b.value(), 3);
  EXPECT_EQ(h.value(), 8);
  const Tensor out = Tensor::Contiguous(storage.data(), DType::kF32, {3, 4, 64}, Device::kCuda);
  const Status s = check.Check("out", out, DType::kF32, {&b, &h, &d});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("out"), std::string::npos);
  EXPECT_NE(s.message().find("H=8"), std::string::npos) << s.message();
  EXPECT_FALSE(check.Check("q", q, DType::kBF16, {&b, &h, &d}).ok());
  EXPECT_FALSE(check.Check("q", q, DType::kF32, {&b, &h, &d}, Device::kCpu).ok());
  Tensor strided = q;
  strided.strides[0] = 1000;
  EXPECT_FALSE(check.Check("q", strided, DType::kF32, {&b, &h, &d}).ok());
  const Tensor misaligned = Tensor::Contiguous(storage.data() + 1, DType::kF32, {3, 8, 64}, Device::kCuda);
  EXPECT_FALSE(check.Check("q", misaligned, DType::kF32, {&b, &h, &d}).ok());
  EXPECT_TRUE(check.CheckOptional("absent", Tensor{}, DType::kF32, {&b}).ok());
}

// Bad arguments are refused before anything reaches the device (fake addresses, no stream).
TEST(MoeLauncherChecks, RejectNamingTheTensor) {
  const int64_t n = 3, e = 8, k = 2, d = 64, i = 32;

  MoeRouteArgs route;
  route.logits = FakeDeviceTensor(0x10000, DType::kF32, {n, e});
  route.bias = FakeDeviceTensor(0x20000, DType::kF32, {e + 1});
  route.topk_ids = FakeDeviceTensor(0x30000, DType::kI32, {n, k});
  route.topk_weights = FakeDeviceTensor(0x40000, DType::kF32, {n, k});
  ExpectInvalidNaming(MoeRoute(route, nullptr), "bias");
  route.bias = FakeDeviceTensor(0x20000, DType::kF32, {e});
  route.topk_weights = FakeDeviceTensor(0x40000, DType::kBF16, {n, k});
  ExpectInvalidNaming(MoeRoute(route, nullptr), "topk_weights");
  route.topk_weights = FakeDeviceTensor(0x40000, DType::kF32, {n, k});
  route.tid2eid = FakeDeviceTensor(0x50000, DType::kI32, {97, k});  // both modes at once
  EXPECT_EQ(MoeRoute(route, nullptr).code(), StatusCode::kInvalidArgument);

  MoeAlignArgs align;
  align.topk_ids = FakeDeviceTensor(0x10000, DType::kI32, {n, k});
  align.expert_offsets = FakeDeviceTensor(0x20000, DType::kI32, {e + 1});
  align.sorted_assignments = FakeDeviceTensor(0x30000, DType::kI32, {n * k + 1});
  ExpectInvalidNaming(MoeAlign(align, nullptr), "sorted_assignments");

  MoeGateUpArgs gate_up;
  gate_up.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, d});
  gate_up.sorted_assignments = FakeDeviceTensor(0x20000, DType::kI32, {n * k});
  gate_up.expert_offsets = FakeDeviceTensor(0x30000, DType::kI32, {e + 1});
  gate_up.w1.weight = FakeDeviceTensor(0x40000, DType::kBF16, {e, i, d});
  gate_up.w3.weight = FakeDeviceTensor(0x50000, DType::kBF16, {e, i + 32, d});
  gate_up.h = FakeDeviceTensor(0x60000, DType::kBF16, {n * k, i});
  ExpectInvalidNaming(MoeGateUp(gate_up, nullptr), "w3");
  gate_up.w3.weight = FakeDeviceTensor(0x50000, DType::kBF16, {e, i, d});
  gate_up.h = FakeDeviceTensor(0x60000, DType::kF32, {n * k, i});
  ExpectInvalidNaming(MoeGateUp(gate_up, nullptr), "h");
  gate_up.h = FakeDeviceTensor(0x60000, DType::kBF16, {n * k, i});
  gate_up.format = MoeWeightFormat::kMxfp4;  // bf16-shaped weights for the MXFP4 format
  ExpectInvalidNaming(MoeGateUp(gate_up, nullptr), "w1");
  gate_up.w1.weight = FakeDeviceTensor(0x40000, DType::kU8, {e, i, d / 2});
  gate_up.w1.scale = FakeDeviceTensor(0x70000, DType::kU8, {e, i, d / 16});
  ExpectInvalidNaming(MoeGateUp(gate_up, nullptr), "w1.scale");
  gate_up.x = FakeDeviceTensor(0x10000, DType::kBF16, {n, 48});  // D not a multiple of 32
  EXPECT_EQ(MoeGateUp(gate_up, nullptr).code(), StatusCode::kInvalidArgument);

  MoeDownArgs down;
  down.h = FakeDeviceTensor(0x10000, DType::kBF16, {n * k, i});
  down.sorted_assignments = FakeDeviceTensor(0x20000, DType::kI32, {n * k});
  down.expert_offsets = FakeDeviceTensor(0x30000, DType::kI32, {e + 1});
  down.w2.weight = FakeDeviceTensor(0x40000, DType::kBF16, {e, d, i});
  down.y = FakeDeviceTensor(0x50000, DType::kBF16, {n * k, d});
  ExpectInvalidNaming(MoeDown(down, nullptr), "y");
  down.y = FakeDeviceTensor(0x50000, DType::kF32, {n * k, d});
  down.expert_offsets = FakeDeviceTensor(0x30000, DType::kI32, {e + 2});
  ExpectInvalidNaming(MoeDown(down, nullptr), "expert_offsets");

  MoeCombineArgs combine;
  combine.y = FakeDeviceTensor(0x10000, DType::kF32, {n * k, d});
  combine.topk_ids = FakeDeviceTensor(0x20000, DType::kI32, {n, k});
  combine.topk_weights = FakeDeviceTensor(0x30000, DType::kF32, {n, k});
  combine.shared = FakeDeviceTensor(0x40000, DType::kBF16, {n, d + 8});
  combine.out = FakeDeviceTensor(0x50000, DType::kBF16, {n, d});
  ExpectInvalidNaming(MoeCombine(combine, nullptr), "shared");
  combine.shared = Tensor{};
  combine.out = FakeDeviceTensor(0x50008, DType::kBF16, {n, d});  // misaligned
  ExpectInvalidNaming(MoeCombine(combine, nullptr), "out");

  // Routing and alignment in one launch: both argument sets are checked, and align must read
  // the ids routing writes.
  route.tid2eid = Tensor{};  // learned routing again
  MoeAlignArgs fused;
  fused.topk_ids = FakeDeviceTensor(0x30000, DType::kI32, {n, k});
  fused.expert_offsets = FakeDeviceTensor(0x50000, DType::kI32, {e + 1});
  fused.sorted_assignments = FakeDeviceTensor(0x60000, DType::kI32, {n * k + 1});
  ExpectInvalidNaming(MoeRouteAndAlign(route, fused, nullptr), "sorted_assignments");
  fused.sorted_assignments = FakeDeviceTensor(0x60000, DType::kI32, {n * k});
  fused.topk_ids = FakeDeviceTensor(0x70000, DType::kI32, {n, k});
  ExpectInvalidNaming(MoeRouteAndAlign(route, fused, nullptr), "topk_ids");
}

// The mHC expansion with the MoE combine fused and the RMSNorm with RoPE fused refuse bad
// arguments, naming the tensor, before anything reaches the device.
TEST(FusedLauncherChecks, RejectNamingTheTensor) {
  const int64_t n = 2, hc = 4, d = 64, k = 6;
  HcPostArgs post;
  post.streams = FakeDeviceTensor(0x10000, DType::kF32, {n, hc, d});
  post.post = FakeDeviceTensor(0x20000, DType::kF32, {n, hc});
  post.comb = FakeDeviceTensor(0x30000, DType::kF32, {n, hc, hc});
  ExpectInvalidNaming(HyperConnectionPost(post, nullptr), "moe_y");  // neither f nor moe_y
  post.moe_y = FakeDeviceTensor(0x40000, DType::kF32, {n * k, d});
  post.moe_topk_ids = FakeDeviceTensor(0x50000, DType::kI32, {n, k});
  post.moe_topk_weights = FakeDeviceTensor(0x60000, DType::kF32, {n, k + 1});
  ExpectInvalidNaming(HyperConnectionPost(post, nullptr), "moe_topk_weights");
  post.moe_topk_weights = FakeDeviceTensor(0x60000, DType::kF32, {n, k});
  post.moe_shared = FakeDeviceTensor(0x70000, DType::kF32, {n, d});
  ExpectInvalidNaming(HyperConnectionPost(post, nullptr), "moe_shared");
  post.moe_shared = Tensor{};
  post.moe_y = FakeDeviceTensor(0x40000, DType::kF32, {n * k, d + 8});
  ExpectInvalidNaming(HyperConnectionPost(post, nullptr), "moe_y");

  RmsNormArgs norm;
  norm.x = FakeDeviceTensor(0x10000, DType::kF32, {8, 512});
  norm.y = FakeDeviceTensor(0x20000, DType::kBF16, {8, 512});
  norm.rope_positions = FakeDeviceTensor(0x30000, DType::kI32, {3});  // 8 rows are not 3 tokens
  norm.rope_cos = FakeDeviceTensor(0x40000, DType::kF32, {16, 32});
  norm.rope_sin = FakeDeviceTensor(0x50000, DType::kF32, {16, 32});
  norm.rope_dim = 64;
  EXPECT_EQ(RmsNorm(norm, nullptr).code(), StatusCode::kInvalidArgument);
  norm.rope_positions = FakeDeviceTensor(0x30000, DType::kI32, {2});
  norm.rope_sin = FakeDeviceTensor(0x50000, DType::kF32, {16, 31});
  ExpectInvalidNaming(RmsNorm(norm, nullptr), "rope_sin");
  norm.rope_sin = FakeDeviceTensor(0x50000, DType::kF32, {16, 32});
  norm.rope_dim = 60;  // not a multiple of 8
  EXPECT_EQ(RmsNorm(norm, nullptr).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::cuda
