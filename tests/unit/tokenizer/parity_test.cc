// Parity with HF `tokenizers` (the venv's Python package) on generated data:
//  - the >= 10 MB corpus from tools/tokenizer_corpus.py through the real DeepSeek-V4 file:
//    encode, decode, decode with skip_special_tokens, and encode with parse_special=false;
//  - regex character classes over every Unicode scalar value;
//  - tokenizer.json variants (tools/tokenizer_variants.py) covering each component option.
// Everything is generated into the build tree at test time.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace peregrine::tokenizer {
namespace {

namespace fs = std::filesystem;
using testing::ShellQuote;

std::string Repaired(std::string_view bytes) {
  std::string out;
  AppendUtf8Lossy(bytes, /*is_final=*/true, out);
  return out;
}

// Compares encodings document by document; fails with the first mismatch described.
void ExpectSameIds(const Tokenizer& t, const std::vector<std::string>& docs,
                   const std::vector<std::vector<int32_t>>& got,
                   const std::vector<std::vector<int32_t>>& want, const std::string& what) {
  ASSERT_EQ(got.size(), docs.size());
  ASSERT_EQ(want.size(), docs.size()) << what;
  size_t num_bad = 0;
  std::string first;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (num_bad++ == 0) first = testing::DescribeMismatch(t, i, docs[i], got[i], want[i]);
  }
  EXPECT_EQ(num_bad, 0u) << what << ": " << num_bad << " of " << docs.size()
                         << " documents differ; first:\n" << first;
}

TEST(ParityTest, DeepSeekV4CorpusMatchesHuggingFace) {
  const auto dir = testing::DeepSeekTokenizerDir();
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const fs::path work = testing::WorkDir();
  const fs::path corpus = work / "corpus.bin";
  auto run = testing::RunTool("tokenizer_corpus.py", "--output " + ShellQuote(corpus.string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto docs = testing::ReadDocs(corpus);
  ASSERT_TRUE(docs.ok()) << docs.status().ToString();
  size_t total = 0;
  for (const auto& d : *docs) total += d.size();
  ASSERT_GE(total, 10'000'000u) << "corpus too small";

  const std::string tok = ShellQuote(dir->string());
  run = testing::RunTool("tokenizer_reference.py",
                         "encode --tokenizer " + tok + " --input " + ShellQuote(corpus.string()) +
                             " --output " + ShellQuote((work / "ref.ids").string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto want = testing::ReadIds(work / "ref.ids");
  ASSERT_TRUE(want.ok()) << want.status().ToString();

  auto t = Tokenizer::FromFile(*dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::vector<std::vector<int32_t>> got;
  const auto start = std::chrono::steady_clock::now();
  for (const auto& d : *docs) {
    auto ids = t->Encode(d);
    ASSERT_TRUE(ids.ok()) << ids.status().ToString();
    got.push_back(std::move(ids).value());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("encoded %zu bytes in %.2f s (%.1f MB/s)\n", total, seconds, total / seconds / 1e6);
  ExpectSameIds(*t, *docs, got, *want, "encode");

  // Decoding our ids gives the (repaired) text back, and the same text HF decodes.
  run = testing::RunTool("tokenizer_reference.py",
                         "decode --tokenizer " + tok + " --input " +
                             ShellQuote((work / "ref.ids").string()) + " --output " +
                             ShellQuote((work / "ref.decoded").string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  run = testing::RunTool("tokenizer_reference.py",
                         "decode --skip-special-tokens --tokenizer " + tok + " --input " +
                             ShellQuote((work / "ref.ids").string()) + " --output " +
                             ShellQuote((work / "ref.decoded_skip").string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto decoded = testing::ReadDocs(work / "ref.decoded");
  const auto decoded_skip = testing::ReadDocs(work / "ref.decoded_skip");
  ASSERT_TRUE(decoded.ok() && decoded_skip.ok());
  ASSERT_EQ(decoded->size(), docs->size());
  for (size_t i = 0; i < docs->size(); ++i) {
    const std::string text = t->Decode(got[i]);
    ASSERT_EQ(text, Repaired((*docs)[i])) << "round trip of document " << i;
    ASSERT_EQ(text, (*decoded)[i]) << "decode of document " << i;
    ASSERT_EQ(t->Decode(got[i], true), (*decoded_skip)[i]) << "skip-special decode of " << i;
  }

  // parse_special=false on the documents that hold special-token text.
  std::vector<std::string> special_docs;
  for (const auto& d : *docs) {
    if (d.find("<｜") != std::string::npos || d.find("think>") != std::string::npos) {
      special_docs.push_back(d);
    }
  }
  ASSERT_GT(special_docs.size(), 50u);
  ASSERT_TRUE(testing::WriteDocs(work / "special.bin", special_docs).ok());
  run = testing::RunTool("tokenizer_reference.py",
                         "encode --no-parse-special --tokenizer " + tok + " --input " +
                             ShellQuote((work / "special.bin").string()) + " --output " +
                             ShellQuote((work / "special.ids").string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto want_plain = testing::ReadIds(work / "special.ids");
  ASSERT_TRUE(want_plain.ok());
  std::vector<std::vector<int32_t>> got_plain;
  for (const auto& d : special_docs) got_plain.push_back(t->Encode(d, false).value());
  ExpectSameIds(*t, special_docs, got_plain, *want_plain, "encode with parse_special=false");
}

// Facts the reference reports about itself: vocabulary size, ids by name, and that a Python
// str holding a lone surrogate cannot reach it at all (the binding rejects it), which is why
// our contract for ill-formed input is Python's errors="replace" decoding.
TEST(ParityTest, ReferenceFactsAgree) {
  const auto dir = testing::DeepSeekTokenizerDir();
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  auto run = testing::RunTool("tokenizer_reference.py",
                              "info --tokenizer " + ShellQuote(dir->string()) +
                                  " '<think>' '</think>' '<｜User｜>' '<｜begin▁of▁sentence｜>'");
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const nlohmann::json info = nlohmann::json::parse(*run, nullptr, false);
  ASSERT_TRUE(info.is_object()) << *run;
  auto t = Tokenizer::FromFile(*dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(info["vocab_size"].get<size_t>(), t->vocab_size());
  for (const char* name : {"<think>", "</think>", "<｜User｜>", "<｜begin▁of▁sentence｜>"}) {
    EXPECT_EQ(info[name].get<int32_t>(), t->TokenToId(name).value_or(-1)) << name;
  }
  EXPECT_EQ(info["lone_surrogate"].get<std::string>().rfind("rejected", 0), 0u)
      << info["lone_surrogate"];
  // Our side: the UTF-8 form of a lone surrogate is three ill-formed bytes.
  EXPECT_EQ(t->Encode("a\xED\xA0\x80" "b").value(),
            t->Encode("a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b").value());
}

// Character classes and escapes over every scalar value: the Unicode tables, \s, \w, \d.
TEST(ParityTest, RegexClassesMatchOnigurumaOnEveryCodePoint) {
  std::string all;
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    AppendUtf8(cp, all);
  }
  const fs::path work = testing::WorkDir();
  ASSERT_TRUE(testing::WriteDocs(work / "scalars.bin", {all}).ok());
  const char* patterns[] = {
      R"(\p{L})", R"(\p{N})", R"(\p{M})", R"(\p{P})", R"(\p{S})", R"(\s)", R"(\d)", R"(\w)",
      R"([^\r\n\p{L}\p{P}\p{S}])", R"(\p{Lu})", R"(\p{Nd})", R"(\P{L})", R"(\W)", R"(\S)",
  };
  // Runs of each class rather than single characters: the same membership test with far
  // fewer pieces for the reference to hand back to Python.
  std::vector<std::string> runs;
  std::string args = "split --input " + ShellQuote((work / "scalars.bin").string()) +
                     " --output " + ShellQuote((work / "scalars.split").string());
  for (const char* single : patterns) {
    runs.push_back(std::string("(?:") + single + ")+");
    args += " --pattern " + ShellQuote(runs.back());
  }
  auto run = testing::RunTool("tokenizer_reference.py", args);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto want = testing::ReadDocs(work / "scalars.split");
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(want->size(), runs.size());
  MatchScratch scratch;
  for (size_t i = 0; i < runs.size(); ++i) {
    SCOPED_TRACE(runs[i]);
    auto regex = Regex::Compile(runs[i], Regex::Syntax::kOniguruma);
    ASSERT_TRUE(regex.ok()) << regex.status().ToString();
    std::string got;
    ASSERT_TRUE(regex->FindAll(all, scratch, [&](size_t b, size_t e) {
      if (e == b) return;
      if (!got.empty()) got.push_back('\0');
      got.append(all, b, e - b);
    }).ok());
    const std::string& expected = (*want)[i];
    if (got == expected) continue;
    size_t k = 0;
    while (k < got.size() && k < expected.size() && got[k] == expected[k]) ++k;
    const size_t from = k > 8 ? k - 8 : 0;
    ADD_FAILURE() << "first difference at byte " << k << ": got \""
                  << testing::Printable(std::string_view(got).substr(from, 24)) << "\" want \""
                  << testing::Printable(std::string_view(expected).substr(from, 24)) << "\"";
  }
}

TEST(ParityTest, TokenizerJsonVariantsMatchHuggingFace) {
  const fs::path work = testing::WorkDir() / "variants";
  auto run = testing::RunTool("tokenizer_variants.py",
                              "--base " + ShellQuote(testing::TinyTokenizerPath().string()) +
                                  " --out-dir " + ShellQuote(work.string()));
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const auto texts = testing::ReadDocs(work / "texts.bin");
  ASSERT_TRUE(texts.ok());
  std::ifstream manifest_file(work / "manifest.json");
  const nlohmann::json manifest = nlohmann::json::parse(manifest_file, nullptr, false);
  ASSERT_TRUE(manifest.is_array() && manifest.size() >= 30);
  for (const auto& v : manifest) {
    const std::string name = v["name"].get<std::string>();
    SCOPED_TRACE(name);
    auto t = Tokenizer::FromFile(v["json"].get<std::string>());
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    const auto want = testing::ReadIds(work / (name + ".ids"));
    const auto decoded = testing::ReadDocs(work / (name + ".decoded"));
    const auto decoded_skip = testing::ReadDocs(work / (name + ".decoded_skip"));
    ASSERT_TRUE(want.ok() && decoded.ok() && decoded_skip.ok());
    std::vector<std::vector<int32_t>> got;
    for (const auto& text : *texts) {
      auto ids = t->Encode(text, v["parse_special"].get<bool>(),
                           v["add_special_tokens"].get<bool>());
      ASSERT_TRUE(ids.ok()) << ids.status().ToString();
      got.push_back(std::move(ids).value());
    }
    ExpectSameIds(*t, *texts, got, *want, name);
    for (size_t i = 0; i < texts->size(); ++i) {
      ASSERT_EQ(t->Decode((*want)[i]), (*decoded)[i]) << "decode of text " << i;
      ASSERT_EQ(t->Decode((*want)[i], true), (*decoded_skip)[i]) << "skip decode of text " << i;
    }
  }
}

}  // namespace
}  // namespace peregrine::tokenizer
