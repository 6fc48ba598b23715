// Tokenizer behaviour on the committed tiny fixture (no Python needed): lookups, added-token
// flags, the invalid UTF-8 contract, loader errors, concurrency.
#include "tokenizer/tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <thread>

#include "test_util.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& Tiny() {
  static const Tokenizer* tokenizer = [] {
    auto t = Tokenizer::FromFile(testing::TinyTokenizerPath());
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return new Tokenizer(std::move(t).value());
  }();
  return *tokenizer;
}

Ids Encode(std::string_view text, bool parse_special = true) {
  auto ids = Tiny().Encode(text, parse_special);
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  return ids.ok() ? *ids : Ids{};
}

std::string TinyJson() {
  std::ifstream in(testing::TinyTokenizerPath(), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(TokenizerTest, LookupsAndSizes) {
  const Tokenizer& t = Tiny();
  EXPECT_EQ(t.vocab_size(), 711u);  // 700 model entries + 12 added, one of them shared
  EXPECT_EQ(t.id_limit(), 711);
  EXPECT_EQ(*t.SpecialTokenId("<think>"), 702);
  EXPECT_EQ(*t.SpecialTokenId("<|bos|>"), 700);
  EXPECT_EQ(*t.SpecialTokenId("ver"), 318);  // already in the model vocabulary: keeps its id
  EXPECT_EQ(t.SpecialTokenId("<nope>").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(t.TokenToId("Ġwor"), 524);
  EXPECT_EQ(t.IdToToken(524), "Ġwor");
  EXPECT_EQ(t.IdToToken(702), "<think>");
  EXPECT_FALSE(t.IdToToken(711).has_value());
  EXPECT_FALSE(t.IdToToken(-1).has_value());
  EXPECT_TRUE(t.IsSpecial(700));
  EXPECT_FALSE(t.IsSpecial(702));  // <think> is added but not special
  EXPECT_EQ(t.TokenBytes(524), " wor");
}

TEST(TokenizerTest, EncodesLikeTheReference) {
  // Expected ids come from HF tokenizers on the same file.
  EXPECT_EQ(Encode(""), Ids{});
  EXPECT_EQ(Encode("Hello world"), (Ids{39, 316, 75, 78, 524, 338}));
  EXPECT_EQ(Encode("a [L]b"), (Ids{64, 704, 65}));         // lstrip absorbs the space
  EXPECT_EQ(Encode("x  [LR]  y"), (Ids{87, 706, 88}));     // lstrip and rstrip
  EXPECT_EQ(Encode("a word b"), (Ids{64, 220, 707, 312}));  // single_word matches a word
  EXPECT_EQ(Encode("sword"), (Ids{82, 86, 279, 67}));       // ... but not inside one
  EXPECT_EQ(Encode("<|a|><|ab|>"), (Ids{708, 709}));        // longest match wins
  EXPECT_EQ(Encode("over"), (Ids{78, 318}));                // added tokens match inside words
}

TEST(TokenizerTest, ParseSpecialFalseOnlyIgnoresSpecialTokens) {
  EXPECT_EQ(Encode("<|bos|><think>ver", /*parse_special=*/false),
            (Ids{27, 91, 65, 78, 82, 91, 29, 702, 318}));
  EXPECT_EQ(Encode("<|bos|>", true), Ids{700});
}

TEST(TokenizerTest, DecodeRoundTripsAndSkipsSpecialTokens) {
  for (std::string_view text : {"Hello world", "中文 and 日本語", "👨‍👩‍👧‍👦 x", "  \n\t spaces  ",
                                "<|bos|>a<think>b</think>c<|eos|>", "123456789"}) {
    const Ids ids = Encode(text);
    EXPECT_EQ(Tiny().Decode(ids), text);
  }
  EXPECT_EQ(Tiny().Decode(Encode("<|bos|>a<think>b<|eos|>"), /*skip_special_tokens=*/true),
            "a<think>b");
  // Ids without a token are dropped, as the reference does.
  EXPECT_EQ(Tiny().Decode(Ids{-5, 39, 99999, 316}), "Hel");
}

TEST(TokenizerTest, IllFormedUtf8IsRepairedLikePython) {
  const std::string fffd(kReplacementCharacter);
  EXPECT_EQ(Encode("\xFF"), Encode(fffd));
  EXPECT_EQ(Encode("a\xED\xA0\x80z"), Encode("a" + fffd + fffd + fffd + "z"));
  EXPECT_EQ(Encode("x\xF0\x9F\x98"), Encode("x" + fffd));
  EXPECT_EQ(Encode("<|bos|>\xC3(<|eos|>"), Encode("<|bos|>" + fffd + "(<|eos|>"));
  EXPECT_EQ(Tiny().Decode(Encode("a\xE0\x80\xAF")), "a" + fffd + fffd + fffd);
}

TEST(TokenizerTest, ConcurrentEncodesAgree) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "Concurrent encode " + std::to_string(i) + " 中文 😀\n";
  const Ids want = Encode(text);
  std::vector<std::thread> threads;
  std::vector<Ids> got(4);
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) got[i] = Tiny().Encode(text).value();
    });
  }
  for (auto& th : threads) th.join();
  for (const Ids& g : got) EXPECT_EQ(g, want);
}

TEST(TokenizerTest, FromFileAcceptsADirectoryAndReportsMissingFiles) {
  auto from_dir = Tokenizer::FromFile(testing::TinyTokenizerPath().parent_path());
  EXPECT_EQ(from_dir.status().code(), StatusCode::kNotFound);  // no tokenizer.json there
  const auto dir = testing::WorkDir() / "model_dir";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::TinyTokenizerPath(), dir / "tokenizer.json",
                             std::filesystem::copy_options::overwrite_existing);
  auto t = Tokenizer::FromFile(dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->vocab_size(), 711u);
}

// Loads the fixture with `edit` applied to its JSON text.
Result<Tokenizer> LoadEdited(std::string_view find, std::string_view replace) {
  std::string json = TinyJson();
  const size_t at = json.find(find);
  EXPECT_NE(at, std::string::npos) << find;
  if (at != std::string::npos) json.replace(at, find.size(), replace);
  return Tokenizer::FromJson(json);
}

TEST(TokenizerTest, RejectsMalformedFilesWithClearErrors) {
  struct Case {
    std::string_view find, replace;
    StatusCode code;
    std::string_view message_part;
  };
  const Case cases[] = {
      {"\"version\": \"1.0\"", "\"version\": \"2.0\"", StatusCode::kInvalidArgument, "version"},
      {"\"type\": \"BPE\"", "\"type\": \"WordPiece\"", StatusCode::kUnimplemented, "WordPiece"},
      {"\"normalizers\": []", "\"normalizers\": [{\"type\": \"NFKC\"}]",
       StatusCode::kUnimplemented, "NFKC"},
      {"\"type\": \"Sequence\",\n  \"pretokenizers\"", "\"type\": \"Metaspace\",\n  \"pretokenizers\"",
       StatusCode::kUnimplemented, "Metaspace"},
      {"\"\\\\p{N}{1,3}\"", "\"[a&&b]\"", StatusCode::kUnimplemented, "intersection"},
      {"\"\\\\p{N}{1,3}\"", "\"(\"", StatusCode::kInvalidArgument, "regex"},
      {"\"behavior\": \"Isolated\"", "\"behavior\": \"Sideways\"", StatusCode::kInvalidArgument,
       "Sideways"},
      {"\"dropout\": null", "\"dropout\": 0.5", StatusCode::kUnimplemented, "dropout"},
      {"\"merges\": [", "\"merges\": [\"a b c\", ", StatusCode::kInvalidArgument, "merges"},
      {"\"merges\": [", "\"merges\": [[\"zz\", \"qq\"], ", StatusCode::kInvalidArgument, "zz"},
      {"\"special\": true", "\"special\": 1", StatusCode::kInvalidArgument, "special"},
      {"\"decoder\": {", "\"decoder\": {\"type\": \"WordPiece\"}, \"x\": {",
       StatusCode::kUnimplemented, "decoder"},
  };
  for (const Case& c : cases) {
    auto t = LoadEdited(c.find, c.replace);
    ASSERT_FALSE(t.ok()) << c.replace;
    EXPECT_EQ(t.status().code(), c.code) << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.message_part), std::string::npos)
        << t.status().ToString();
  }
  EXPECT_EQ(Tokenizer::FromJson("{").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("[]").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromJson("{}").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Tokenizer::FromFile("/nonexistent/tokenizer.json").status().code(),
            StatusCode::kNotFound);
}

TEST(TokenizerTest, TemplateIdsMustHaveTokens) {
  const std::string template_json =
      R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "B", "type_id": 0}},
          {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"B": {"id": "B", "ids": [IDS], "tokens": ["B"]}}},)";
  std::string ok = template_json;
  ok.replace(ok.find("IDS"), 3, "700");
  auto t = LoadEdited("\"post_processor\": {", ok + " \"unused\": {");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->Encode("x", true, /*add_special_tokens=*/true).value(), (Ids{700, 87}));
  EXPECT_EQ(t->Encode("x").value(), Ids{87});
  std::string bad = template_json;
  bad.replace(bad.find("IDS"), 3, "711");
  auto rejected = LoadEdited("\"post_processor\": {", bad + " \"unused\": {");
  ASSERT_FALSE(rejected.ok());
  EXPECT_EQ(rejected.status().code(), StatusCode::kInvalidArgument);
}

TEST(TokenizerTest, ByteLevelMustBeTheLastPreTokenizer) {
  auto t = LoadEdited("\"pretokenizers\": [",
                      "\"pretokenizers\": [{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                      "\"trim_offsets\": true, \"use_regex\": false}, ");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace peregrine::tokenizer
