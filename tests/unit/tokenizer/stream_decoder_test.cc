#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& Load(bool deepseek) {
  static const Tokenizer* tiny = nullptr;
  static const Tokenizer* v4 = nullptr;
  const Tokenizer*& slot = deepseek ? v4 : tiny;
  if (slot == nullptr) {
    std::filesystem::path path = testing::TinyTokenizerPath();
    if (deepseek) {
      auto dir = testing::DeepSeekTokenizerDir();
      EXPECT_TRUE(dir.ok()) << dir.status().ToString();
      path = dir.ok() ? *dir : path;
    }
    auto t = Tokenizer::FromFile(path);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    slot = new Tokenizer(std::move(t).value());
  }
  return *slot;
}

// Streams `ids`, checking every piece is valid UTF-8; returns all pieces joined.
std::string Stream(const Tokenizer& t, const Ids& ids, bool skip_special = false,
                   std::vector<std::string>* pieces = nullptr) {
  StreamDecoder decoder(t, skip_special);
  std::string all;
  for (const int32_t id : ids) {
    const std::string piece = decoder.Push(id);
    EXPECT_TRUE(IsValidUtf8(piece)) << testing::Printable(piece);
    if (pieces != nullptr) pieces->push_back(piece);
    all += piece;
  }
  const std::string rest = decoder.Flush();
  EXPECT_TRUE(IsValidUtf8(rest));
  all += rest;
  return all;
}

class StreamDecoderTest : public ::testing::TestWithParam<bool> {};

TEST_P(StreamDecoderTest, PiecesConcatenateToTheFullDecode) {
  const Tokenizer& t = Load(GetParam());
  for (std::string_view text :
       {"plain ascii text", "中文测试，混合English文本。", "日本語のテキスト", "한국어 문장",
        "👨‍👩‍👧‍👦 family", "🏳️‍🌈🇯🇵🇺🇸1️⃣", "🧑🏽‍💻 coding 🫶🏼", "e\u0301 a\u0300\u0301",
        "مرحبا بالعالم", "<think>思考</think>答案", "\xF0\x9F\x98 broken", "a\xED\xA0\x80z"}) {
    const Ids ids = t.Encode(text).value();
    const std::string streamed = Stream(t, ids);
    EXPECT_EQ(streamed, t.Decode(ids)) << text;
    EXPECT_EQ(streamed, t.Decode(ids, false));
    if (IsValidUtf8(text)) {
      EXPECT_EQ(streamed, text);
    }
  }
}

TEST_P(StreamDecoderTest, HoldsBackAPartialCharacter) {
  const Tokenizer& t = Load(GetParam());
  // An emoji ZWJ sequence: the byte-level vocabulary splits at least one code point.
  const Ids ids = t.Encode("👨‍👩‍👧‍👦").value();
  ASSERT_GT(ids.size(), 1u);
  StreamDecoder decoder(t);
  bool held_back = false;
  std::string all;
  for (const int32_t id : ids) {
    all += decoder.Push(id);
    held_back = held_back || decoder.num_pending_bytes() > 0;
  }
  EXPECT_TRUE(held_back);
  EXPECT_EQ(decoder.num_pending_bytes(), 0u);
  EXPECT_EQ(all + decoder.Flush(), "👨‍👩‍👧‍👦");
}

TEST_P(StreamDecoderTest, InvalidBytesBecomeReplacementCharacters) {
  const Tokenizer& t = Load(GetParam());
  // Byte tokens for F0 9F (start of an emoji) then "A": the pair can never complete.
  const auto f0 = t.TokenToId("ð");   // byte 0xF0 in the byte alphabet
  const auto x9f = t.TokenToId("Ł");  // byte 0x9F
  const auto a = t.TokenToId("A");
  ASSERT_TRUE(f0 && x9f && a);
  StreamDecoder decoder(t);
  EXPECT_EQ(decoder.Push(*f0), "");
  EXPECT_EQ(decoder.Push(*x9f), "");
  EXPECT_EQ(decoder.num_pending_bytes(), 2u);
  EXPECT_EQ(decoder.Push(*a), std::string(kReplacementCharacter) + "A");
  EXPECT_EQ(decoder.Push(*f0), "");
  EXPECT_EQ(decoder.Flush(), kReplacementCharacter);  // truncated at the end
  const Ids ids = {*f0, *x9f, *a, *f0};
  EXPECT_EQ(Stream(t, ids), t.Decode(ids));
}

TEST_P(StreamDecoderTest, SkipsSpecialTokensLikeDecode) {
  const Tokenizer& t = Load(GetParam());
  const std::string text = GetParam() ? "<｜begin▁of▁sentence｜>hi<｜User｜>x<think>y</think><｜end▁of▁sentence｜>"
                                      : "<|bos|>hi<think>y</think><|eos|>";
  const Ids ids = t.Encode(text).value();
  EXPECT_EQ(Stream(t, ids, true), t.Decode(ids, true));
  EXPECT_NE(t.Decode(ids, true), t.Decode(ids, false));
}

TEST_P(StreamDecoderTest, RandomIdsMatchDecode) {
  const Tokenizer& t = Load(GetParam());
  std::mt19937 rng(GetParam() ? 7 : 8);
  for (int round = 0; round < 300; ++round) {
    Ids ids(rng() % 40);
    for (auto& id : ids) {
      // Mostly low ids (short tokens, many single bytes that split characters), some
      // anywhere, some without a token.
      const unsigned roll = rng() % 10;
      id = roll < 6 ? static_cast<int32_t>(rng() % 256)
                    : roll < 9 ? static_cast<int32_t>(rng() % static_cast<unsigned>(t.id_limit()))
                               : static_cast<int32_t>(rng() % 3 == 0 ? -1 : t.id_limit() + 3);
    }
    const bool skip = rng() % 2 == 0;
    ASSERT_EQ(Stream(t, ids, skip), t.Decode(ids, skip)) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Files, StreamDecoderTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "DeepSeekV4" : "Tiny"; });

}  // namespace
}  // namespace peregrine::tokenizer
