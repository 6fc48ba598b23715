// MoeRouteAndAlign (routing and alignment of a few tokens in one launch of one block) against
// MoeRoute then MoeAlign, bit for bit; its argument check.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/ops/moe.h"
#include "gpu_test_util.h"
#include "kernels/moe_router.cuh"

namespace peregrine::testing {
namespace {

class MoeRouteAlignTest : public GpuTest {};

// Routing and alignment in one launch (a few tokens) give the bits of the two launches:
// learned and hash routing, expert-parallel ranges, batches on both sides of the fused limit
// (one token takes the two launches as well).
TEST_F(MoeRouteAlignTest, OneLaunchMatchesTheTwoLaunches) {
  std::mt19937 rng(2024);
  for (const auto& [e, k] : {std::pair<int64_t, int64_t>{8, 2}, {256, 6}, {512, 16}})
    for (int64_t n : {int64_t{1}, int64_t{3}, kernels::kMoeFusedAlignMax / k, kernels::kMoeFusedAlignMax / k + 1})
      for (bool hash : {false, true})
        for (const auto& [begin, count] : {std::pair<int64_t, int64_t>{0, 0}, {e / 4, e / 2}}) {
          SCOPED_TRACE("E=" + std::to_string(e) + " K=" + std::to_string(k) + " N=" + std::to_string(n) +
                       (hash ? " hash" : " learned") + " local " + std::to_string(begin) + "+" + std::to_string(count));
          const int64_t vocab = 97, local = count == 0 ? e : count, nk = n * k;
          const cuda::DeviceBuffer logits = Upload(RandomNormal(rng, static_cast<size_t>(n * e), 2.0f));
          const cuda::DeviceBuffer bias = Upload(RandomNormal(rng, static_cast<size_t>(e), 0.3f));
          std::vector<int32_t> table(static_cast<size_t>(vocab * k)), tokens(static_cast<size_t>(n));
          for (auto& v : table) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(e + 2)) - 1;  // some out of range
          for (auto& v : tokens) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab + 3)) - 1;
          const cuda::DeviceBuffer tid2eid = Upload(table), token_ids = Upload(tokens);
          auto run = [&](bool fused) {
            const cuda::DeviceBuffer ids = Poisoned(static_cast<size_t>(nk) * 4, 0xab);
            const cuda::DeviceBuffer weights = Poisoned(static_cast<size_t>(nk) * 4);
            const cuda::DeviceBuffer offsets = Poisoned(static_cast<size_t>(local + 1) * 4, 0xcd);
            const cuda::DeviceBuffer sorted = Poisoned(static_cast<size_t>(nk) * 4, 0xcd);
            cuda::MoeRouteArgs route;
            route.logits = View(logits, DType::kF32, {n, e});
            if (hash) {
              route.tid2eid = View(tid2eid, DType::kI32, {vocab, k});
              route.token_ids = View(token_ids, DType::kI32, {n});
            } else {
              route.bias = View(bias, DType::kF32, {e});
            }
            route.topk_ids = View(ids, DType::kI32, {n, k});
            route.topk_weights = View(weights, DType::kF32, {n, k});
            route.routed_scaling_factor = 1.5f;
            route.local_begin = static_cast<int>(begin);
            route.local_count = static_cast<int>(count);
            cuda::MoeAlignArgs align;
            align.topk_ids = route.topk_ids;
            align.expert_offsets = View(offsets, DType::kI32, {local + 1});
            align.sorted_assignments = View(sorted, DType::kI32, {nk});
            if (fused) {
              EXPECT_TRUE(cuda::MoeRouteAndAlign(route, align, stream_.get()).ok());
            } else {
              EXPECT_TRUE(cuda::MoeRoute(route, stream_.get()).ok());
              EXPECT_TRUE(cuda::MoeAlign(align, stream_.get()).ok());
            }
            std::vector<int32_t> got_offsets = Download<int32_t>(offsets, static_cast<size_t>(local + 1));
            std::vector<int32_t> got_sorted = Download<int32_t>(sorted, static_cast<size_t>(nk));
            got_sorted.resize(static_cast<size_t>(std::clamp<int64_t>(got_offsets.back(), 0, nk)));  // the rest unwritten
            return std::tuple(Download<int32_t>(ids, static_cast<size_t>(nk)), Download<uint32_t>(weights, static_cast<size_t>(nk)),
                              got_offsets, got_sorted);
          };
          const auto two = run(false);
          const auto one = run(true);
          EXPECT_EQ(std::get<0>(one), std::get<0>(two)) << "topk_ids";
          EXPECT_EQ(std::get<1>(one), std::get<1>(two)) << "topk_weights";
          EXPECT_EQ(std::get<2>(one), std::get<2>(two)) << "expert_offsets";
          EXPECT_EQ(std::get<3>(one), std::get<3>(two)) << "sorted_assignments";
        }
  // The fused launch checks that align reads route's ids.
  const cuda::DeviceBuffer buf = Poisoned(1 << 16);
  cuda::MoeRouteArgs route;
  route.logits = View(buf, DType::kF32, {2, 8});
  route.bias = View(buf, DType::kF32, {8});
  route.topk_ids = View(buf, DType::kI32, {2, 2});
  route.topk_weights = View(buf, DType::kF32, {2, 2});
  cuda::MoeAlignArgs align;
  align.topk_ids = Tensor::Contiguous(static_cast<char*>(buf.data()) + 1024, DType::kI32, {2, 2}, peregrine::Device::kCuda);
  align.expert_offsets = View(buf, DType::kI32, {9});
  align.sorted_assignments = View(buf, DType::kI32, {4});
  EXPECT_EQ(cuda::MoeRouteAndAlign(route, align, stream_.get()).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace peregrine::testing
