#include "structured/grammar_engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <string>
#include <vector>

namespace peregrine::structured {
namespace {

// Ids 0..255: the single bytes; then a few multi-byte pieces; then a stop token (no bytes).
struct TestVocab {
  GrammarVocabulary vocab;
  int32_t stop = 0;
  std::vector<std::string> pieces;
};

TestVocab MakeVocab(int extra_random = 0) {
  TestVocab t;
  for (int b = 0; b < 256; ++b) t.vocab.token_bytes.push_back(std::string(1, static_cast<char>(b)));
  for (const char* p : {"{\"", "\": ", "\":", "true", "false", "null", "name", "age", "\"}", ", \"", "yes", "no", "12"})
    t.vocab.token_bytes.push_back(p);
  std::mt19937 rng(7);
  for (int i = 0; i < extra_random; ++i) {
    std::string s;
    const int len = 2 + static_cast<int>(rng() % 6);
    for (int k = 0; k < len; ++k) s += static_cast<char>('a' + rng() % 26);
    t.vocab.token_bytes.push_back(s);
  }
  t.stop = static_cast<int32_t>(t.vocab.token_bytes.size());
  t.vocab.token_bytes.push_back("");
  t.vocab.stop_token_ids = {t.stop};
  return t;
}

std::unique_ptr<GrammarEngine> MakeEngine(const TestVocab& v, GrammarEngineOptions o = {}) {
  auto engine = GrammarEngine::Create(v.vocab, o);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(*engine);
}

bool Bit(const std::vector<uint32_t>& mask, int32_t id) { return (mask[id / 32] >> (id % 32)) & 1u; }

// Feeds `text` byte by byte; returns how many bytes were accepted.
size_t AcceptBytes(GrammarMatcher& m, const std::string& text) {
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.Accept(static_cast<unsigned char>(text[i]))) return i;
  return text.size();
}

GrammarSpec Schema(std::string s) {
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.source = std::move(s);
  return spec;
}

const char* kPerson = R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
                          "required":["name","age"],"additionalProperties":false})";

TEST(GrammarEngineTest, JsonSchemaAcceptsConformingTextAndThenOnlyTheStopToken) {
  TestVocab v = MakeVocab();
  auto engine = MakeEngine(v);
  auto g = engine->Compile(Schema(kPerson));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  GrammarMatcher m(*g);
  const std::string doc = R"({"name": "Ada", "age": 36})";
  EXPECT_EQ(AcceptBytes(m, doc), doc.size());
  std::vector<uint32_t> mask(static_cast<size_t>(MaskWords(engine->vocab_size())));
  ASSERT_TRUE(m.FillMask(mask.data()));
  for (int32_t id = 0; id < engine->vocab_size(); ++id) {
    if (id == v.stop) continue;
    EXPECT_FALSE(Bit(mask, id)) << id;  // after the closing brace only the stop token
  }
  EXPECT_TRUE(Bit(mask, v.stop));
  EXPECT_FALSE(m.is_terminated());
  EXPECT_TRUE(m.Accept(v.stop));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.Accept('x'));
}

TEST(GrammarEngineTest, JsonSchemaRejectsAtTheFirstNonConformingByte) {
  TestVocab v = MakeVocab();
  auto engine = MakeEngine(v);
  auto g = engine->Compile(Schema(kPerson));
  ASSERT_TRUE(g.ok());
  GrammarMatcher wrong_type(*g);
  const std::string bad = R"({"name": "Ada", "age": "36"})";
  EXPECT_EQ(AcceptBytes(wrong_type, bad), bad.find("\"36"));
  GrammarMatcher extra(*g);
  EXPECT_LT(AcceptBytes(extra, R"({"name": "Ada", "age": 36, "x": 1})"), 34u);
  // Multi-byte pieces are judged as a whole.
  GrammarMatcher pieces(*g);
  EXPECT_TRUE(pieces.Accept(256));   // {"
  EXPECT_FALSE(pieces.Accept(259));  // true: not a property of the schema
  EXPECT_TRUE(pieces.Accept(262));   // name
}

TEST(GrammarEngineTest, TheMaskIsExactlyTheTokensAcceptWouldTake) {
  TestVocab v = MakeVocab(200);
  auto engine = MakeEngine(v);
  for (const GrammarSpec& spec : {Schema(kPerson), GrammarSpec{GrammarKind::kJsonObject, "", {}, true},
                                  GrammarSpec{GrammarKind::kRegex, "[0-9]{2,3}-(yes|no)", {}, true}}) {
    auto g = engine->Compile(spec);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    GrammarMatcher m(*g);
    const std::string prefix = spec.kind == GrammarKind::kRegex ? "12" : R"({"name": "A)";
    ASSERT_EQ(AcceptBytes(m, prefix), prefix.size());
    std::vector<uint32_t> mask(static_cast<size_t>(MaskWords(engine->vocab_size())));
    m.FillMask(mask.data());
    int allowed = 0;
    for (int32_t id = 0; id < engine->vocab_size(); ++id) {
      const bool ok = m.Accept(id);
      if (ok) m.Rollback(1);
      EXPECT_EQ(Bit(mask, id), ok) << GrammarKindName(spec.kind) << " token " << id;
      allowed += ok;
    }
    EXPECT_GT(allowed, 0);
  }
}

TEST(GrammarEngineTest, ChoiceAllowsExactlyTheListedStrings) {
  TestVocab v = MakeVocab();
  auto engine = MakeEngine(v);
  GrammarSpec spec{GrammarKind::kChoice, "", {"yes", "no", "a \"quoted\"\\ one\n"}, true};
  auto g = engine->Compile(spec);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  for (const std::string& c : spec.choices) {
    GrammarMatcher m(*g);
    EXPECT_EQ(AcceptBytes(m, c), c.size()) << c;
    EXPECT_TRUE(m.Accept(v.stop)) << c;
  }
  GrammarMatcher m(*g);
  EXPECT_EQ(AcceptBytes(m, "yet"), 2u);
  GrammarMatcher prefix(*g);
  EXPECT_EQ(AcceptBytes(prefix, "ye"), 2u);
  EXPECT_FALSE(prefix.Accept(v.stop));  // "ye" is not a choice
  EXPECT_FALSE(engine->Compile(GrammarSpec{GrammarKind::kChoice, "", {}, true}).ok());
  EXPECT_FALSE(engine->Compile(GrammarSpec{GrammarKind::kChoice, "", {"a", ""}, true}).ok());
}

TEST(GrammarEngineTest, BadGrammarsAreInvalidArguments) {
  TestVocab v = MakeVocab();
  auto engine = MakeEngine(v);
  const GrammarSpec bad[] = {
      Schema("{not json"),
      Schema(R"({"type":"nonsense"})"),
      GrammarSpec{GrammarKind::kRegex, "([a-z]", {}, true},
      GrammarSpec{GrammarKind::kEbnf, "root ::= \"a\" undefined_rule", {}, true},
      GrammarSpec{GrammarKind::kStructuralTag, "{\"type\": 3}", {}, true},
  };
  for (const GrammarSpec& spec : bad) {
    auto g = engine->Compile(spec);
    ASSERT_FALSE(g.ok()) << spec.source;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument) << spec.source;
    EXPECT_FALSE(g.status().message().empty());
  }
  // The engine still compiles good grammars afterwards.
  EXPECT_TRUE(engine->Compile(Schema(kPerson)).ok());
}

TEST(GrammarEngineTest, SlowCompilationsHitTheTimeLimitAndABusyEngineRefusesAtOnce) {
  TestVocab v = MakeVocab(60'000);  // mask caches over 60K tokens take far longer than 1 ms
  GrammarEngineOptions o;
  o.compile_threads = 1;
  o.max_queued = 0;
  o.time_limit = std::chrono::milliseconds(1);
  auto engine = MakeEngine(v, o);
  const auto start = std::chrono::steady_clock::now();
  auto slow = engine->Compile(Schema(kPerson));
  ASSERT_FALSE(slow.ok());
  EXPECT_EQ(slow.status().code(), StatusCode::kDeadlineExceeded);
  // The overrunning compilation still holds the only thread: the next one is refused.
  auto refused = engine->Compile(Schema(R"({"type":"integer"})"));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST(GrammarEngineTest, TheCacheStaysWithinItsLimitOverManyUniqueSchemas) {
  TestVocab v = MakeVocab(2000);
  GrammarEngineOptions o;
  o.cache_bytes = 2 << 20;
  auto engine = MakeEngine(v, o);
  EXPECT_EQ(engine->cache_limit_bytes(), 2 << 20);
  std::vector<std::shared_ptr<const CompiledGrammar>> last;
  for (int i = 0; i < 300; ++i) {
    const std::string schema = R"({"type":"object","properties":{"field_)" + std::to_string(i) +
                               R"(":{"type":"string","maxLength":)" + std::to_string(i % 17 + 1) +
                               R"(}},"required":["field_)" + std::to_string(i) + R"("]})";
    auto g = engine->Compile(Schema(schema));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_LE(engine->cache_bytes(), engine->cache_limit_bytes()) << i;
    if (i >= 298) last.push_back(*g);
  }
  EXPECT_GT(engine->cache_bytes(), 0);
  // Grammars in use stay valid whatever the cache evicted.
  GrammarMatcher m(last.front());
  EXPECT_EQ(AcceptBytes(m, R"({"field_298": "x"})"), 18u);
}

TEST(GrammarEngineTest, CacheKeysSeparateEverythingThatChangesTheGrammar) {
  GrammarSpec a{GrammarKind::kChoice, "", {"ab", "c"}, true};
  GrammarSpec b{GrammarKind::kChoice, "", {"a", "bc"}, true};
  GrammarSpec c{GrammarKind::kRegex, "ab", {}, true};
  GrammarSpec d{GrammarKind::kEbnf, "ab", {}, true};
  GrammarSpec e = Schema("{}");
  GrammarSpec f = Schema("{}");
  f.any_whitespace = false;
  EXPECT_NE(a.CacheKey(), b.CacheKey());
  EXPECT_NE(c.CacheKey(), d.CacheKey());
  EXPECT_NE(e.CacheKey(), f.CacheKey());
  EXPECT_EQ(e.CacheKey(), Schema("{}").CacheKey());
}

TEST(GrammarEngineTest, JsonWhitespaceRunsAreBoundedUnlessCompact) {
  TestVocab v = MakeVocab();
  auto engine = MakeEngine(v);
  for (GrammarKind kind : {GrammarKind::kJsonSchema, GrammarKind::kJsonObject}) {
    GrammarSpec spec = Schema(kPerson);
    spec.kind = kind;
    auto g = engine->Compile(spec);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    GrammarMatcher at_limit(*g);
    const std::string pad(static_cast<size_t>(kMaxJsonWhitespace), ' ');
    EXPECT_EQ(AcceptBytes(at_limit, "{" + pad + "\"name\""), 1 + pad.size() + 6);
    GrammarMatcher past(*g);
    EXPECT_EQ(AcceptBytes(past, "{" + pad + " "), 1 + pad.size()) << "one space past the limit is refused";
  }
  GrammarSpec compact = Schema(kPerson);
  compact.any_whitespace = false;
  auto g = engine->Compile(compact);
  ASSERT_TRUE(g.ok());
  GrammarMatcher m(*g);
  EXPECT_EQ(AcceptBytes(m, "{ "), 1u);
}

// The batch fill writes, on its threads, exactly what each matcher's own FillMask writes, at
// the rows it is given; an all-allowed row comes out all ones, a terminated one as its stop.
TEST(GrammarEngineTest, MaskBatchEqualsOneByOneAtTheGivenRows) {
  TestVocab v = MakeVocab(200);
  auto engine = MakeEngine(v);
  auto schema = engine->Compile(Schema(kPerson));
  GrammarSpec regex{GrammarKind::kRegex, "[a-z]{2,9}x", {}, true};
  auto re = engine->Compile(regex);
  ASSERT_TRUE(schema.ok() && re.ok());
  std::vector<GrammarMatcher> matchers;
  const std::vector<std::string> prefixes = {"", "{", "{\"name\": \"A", "{\"name\": \"Al\", \"age\": 4", "{\"na"};
  for (int i = 0; i < 12; ++i) {
    matchers.emplace_back(i % 3 == 2 ? *re : *schema);
    if (i % 3 == 2) {
      AcceptBytes(matchers.back(), std::string(static_cast<size_t>(i / 3), 'q'));
    } else {
      AcceptBytes(matchers.back(), prefixes[static_cast<size_t>(i) % prefixes.size()]);
    }
  }
  // One completed and terminated matcher.
  matchers.emplace_back(*re);
  ASSERT_EQ(AcceptBytes(matchers.back(), "abx"), 3u);
  ASSERT_TRUE(matchers.back().Accept(v.stop));
  const int64_t words = MaskWords(static_cast<int64_t>(v.vocab.token_bytes.size()));
  const int64_t num_rows = static_cast<int64_t>(matchers.size()) + 3;
  std::vector<int32_t> rows;
  std::vector<GrammarMatcher*> ptrs;
  for (size_t j = 0; j < matchers.size(); ++j) {
    ptrs.push_back(&matchers[j]);
    rows.push_back(static_cast<int32_t>(num_rows - 1 - static_cast<int64_t>(j)));  // reversed, gaps at 0..2
  }
  for (int threads : {1, 4}) {
    std::vector<uint32_t> got(static_cast<size_t>(num_rows * words), 0xdeadbeefu);
    MaskBatch batch(threads);
    batch.Fill(ptrs, rows, num_rows, got.data());
    for (size_t j = 0; j < matchers.size(); ++j) {
      std::vector<uint32_t> want(static_cast<size_t>(words));
      if (!matchers[j].FillMask(want.data())) std::fill(want.begin(), want.end(), ~0u);
      const uint32_t* row = got.data() + static_cast<size_t>(rows[j]) * static_cast<size_t>(words);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), row)) << "threads " << threads << " matcher " << j;
    }
    for (int64_t r = 0; r < 3; ++r)
      EXPECT_EQ(got[static_cast<size_t>(r * words)], 0xdeadbeefu) << "rows not given stay untouched";
  }
}

TEST(GrammarEngineTest, ChoicesToEbnfEscapes) {
  EXPECT_EQ(ChoicesToEbnf({"a\"b", "c\\d", "e\nf"}), "root ::= \"a\\\"b\" | \"c\\\\d\" | \"e\\x0af\"");
}

}  // namespace
}  // namespace peregrine::structured
