#include "runtime/step_message.h"

#include <gtest/gtest.h>

#include <vector>

namespace peregrine {
namespace {

TEST(StepMessageTest, ChunksRoundTrip) {
  const std::vector<int32_t> t0 = {5, 6, 7}, b0 = {3, 9}, s0 = {-1, 4};
  const std::vector<int32_t> t1 = {}, b1 = {1}, p1 = {-1, 0, 0};
  std::vector<ChunkView> chunks(2);
  chunks[0].slot = 2;
  chunks[0].first_position = 1000000;
  chunks[0].num_tokens = 3;
  chunks[0].tokens = t0;
  chunks[0].blocks = b0;
  chunks[0].snapshots = s0;
  chunks[0].restore = 11;
  chunks[0].all_logits = true;
  chunks[1].slot = 0;
  chunks[1].first_position = 7;
  chunks[1].num_tokens = 1;
  chunks[1].tokens = t1;
  chunks[1].feeds_last = true;
  chunks[1].needs_logits = true;
  chunks[1].keep_hidden = true;
  chunks[1].blocks = b1;
  chunks[1].tree_parents = p1;
  auto words = EncodeChunks(chunks);
  ASSERT_TRUE(words.ok()) << words.status().ToString();
  auto decoded = DecodedChunks::Decode(*words);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  const DecodedChunks moved = std::move(decoded).value();
  ASSERT_EQ(moved.chunks().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const ChunkView& want = chunks[i];
    const ChunkView& got = moved.chunks()[i];
    EXPECT_EQ(got.slot, want.slot);
    EXPECT_EQ(got.first_position, want.first_position);
    EXPECT_EQ(got.num_tokens, want.num_tokens);
    EXPECT_EQ(got.feeds_last, want.feeds_last);
    EXPECT_EQ(got.needs_logits, want.needs_logits);
    EXPECT_EQ(got.all_logits, want.all_logits);
    EXPECT_EQ(got.keep_hidden, want.keep_hidden);
    EXPECT_EQ(got.restore, want.restore);
    EXPECT_EQ(std::vector<int32_t>(got.tokens.begin(), got.tokens.end()),
              std::vector<int32_t>(want.tokens.begin(), want.tokens.end()));
    EXPECT_EQ(std::vector<int32_t>(got.blocks.begin(), got.blocks.end()),
              std::vector<int32_t>(want.blocks.begin(), want.blocks.end()));
    EXPECT_EQ(std::vector<int32_t>(got.snapshots.begin(), got.snapshots.end()),
              std::vector<int32_t>(want.snapshots.begin(), want.snapshots.end()));
    EXPECT_EQ(std::vector<int32_t>(got.tree_parents.begin(), got.tree_parents.end()),
              std::vector<int32_t>(want.tree_parents.begin(), want.tree_parents.end()));
  }
}

TEST(StepMessageTest, RefusesDamagedWords) {
  const std::vector<int32_t> t = {1, 2};
  ChunkView c;
  c.num_tokens = 2;
  c.tokens = t;
  auto words = EncodeChunks({&c, 1});
  ASSERT_TRUE(words.ok());
  std::vector<int32_t> w = *words;
  EXPECT_FALSE(DecodedChunks::Decode(std::span<const int32_t>(w.data(), w.size() - 1)).ok());  // truncated
  w.push_back(0);
  EXPECT_FALSE(DecodedChunks::Decode(w).ok());  // trailing
  w = *words;
  w[6] = 1000;  // token count past the end
  EXPECT_FALSE(DecodedChunks::Decode(w).ok());
  EXPECT_FALSE(DecodedChunks::Decode({}).ok());
  c.first_position = int64_t{1} << 40;
  EXPECT_EQ(EncodeChunks({&c, 1}).status().code(), StatusCode::kInvalidArgument);
}

TEST(StepMessageTest, HeaderChecksItself) {
  RankHeader h = MakeRankHeader(RankCommand::kEnableGraphs, 0, 64);
  RankCommand command{};
  int64_t words = -1;
  int32_t argument = 0;
  ASSERT_TRUE(ReadRankHeader(h, &command, &words, &argument).ok());
  EXPECT_EQ(command, RankCommand::kEnableGraphs);
  EXPECT_EQ(words, 0);
  EXPECT_EQ(argument, 64);
  h[2] = 65;
  EXPECT_EQ(ReadRankHeader(h, &command, &words, &argument).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(ReadRankHeader(RankHeader{0, 0, 0, 0}, &command, &words, &argument).ok());
}

}  // namespace
}  // namespace peregrine
