#include "bench_client/workload.h"

#include <array>
#include <cmath>
#include <limits>
#include <string_view>

namespace peregrine::bench_client {

namespace {

// Short, frequent English words: each is one token in the usual BPE vocabularies when preceded
// by a space, so a prompt of N words is close to N tokens.
constexpr std::array<std::string_view, 96> kWords = {
    "the",   "of",    "and",   "to",    "in",    "is",    "that",  "for",   "it",    "as",
    "was",   "with",  "be",    "by",    "on",    "not",   "he",    "this",  "are",   "or",
    "his",   "from",  "at",    "which", "but",   "have",  "an",    "had",   "they",  "you",
    "were",  "their", "one",   "all",   "we",    "can",   "her",   "has",   "there", "been",
    "if",    "more",  "when",  "will",  "would", "who",   "so",    "no",    "time",  "about",
    "many",  "then",  "them",  "some",  "new",   "may",   "first", "after", "other", "into",
    "year",  "two",   "also",  "most",  "over",  "these", "only",  "world", "state", "could",
    "people", "water", "house", "light", "river", "paper", "green", "music", "table", "night",
    "city",  "road",  "game",  "field", "power", "story", "money", "study", "point", "place",
    "train", "north", "small", "large", "early", "round"};

int DrawLength(Rng& rng, int len, double range_ratio) {
  const auto lo = static_cast<int64_t>(std::floor(len * (1.0 - range_ratio)));
  const auto hi = static_cast<int64_t>(std::ceil(len * (1.0 + range_ratio)));
  return static_cast<int>(std::max<int64_t>(1, rng.NextInt(std::max<int64_t>(1, lo), std::max<int64_t>(1, hi))));
}

}  // namespace

double Rng::NextUniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

int64_t Rng::NextInt(int64_t lo, int64_t hi) {
  const auto span = static_cast<double>(hi - lo + 1);
  const auto offset = static_cast<int64_t>(NextUniform() * span);
  return lo + std::min<int64_t>(offset, hi - lo);
}

double Rng::NextExponential(double rate) { return -std::log1p(-NextUniform()) / rate; }

Status ValidateWorkload(const WorkloadOptions& options) {
  if (options.num_prompts < 1) return InvalidArgument("num_prompts must be at least 1");
  if (options.input_len < 1) return InvalidArgument("input_len must be at least 1");
  if (options.output_len < 1) return InvalidArgument("output_len must be at least 1");
  if (!(options.range_ratio >= 0.0 && options.range_ratio < 1.0)) {
    return InvalidArgument("range_ratio must be in [0, 1)");
  }
  if (options.prefix_len < 0) return InvalidArgument("prefix_len must not be negative");
  return Status::Ok();
}

Result<std::vector<PromptSpec>> MakeRandomWorkload(const WorkloadOptions& options) {
  PG_RETURN_IF_ERROR(ValidateWorkload(options));
  Rng rng(options.seed);
  std::string prefix;
  {
    Rng prefix_rng(options.seed ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < options.prefix_len; ++i) {
      prefix += kWords[static_cast<size_t>(prefix_rng.NextInt(0, kWords.size() - 1))];
      prefix += ' ';
    }
  }
  std::vector<PromptSpec> prompts(static_cast<size_t>(options.num_prompts));
  for (PromptSpec& spec : prompts) {
    const int own = DrawLength(rng, options.input_len, options.range_ratio);
    spec.input_len = options.prefix_len + own;
    spec.output_len = DrawLength(rng, options.output_len, options.range_ratio);
    spec.prompt.reserve(prefix.size() + static_cast<size_t>(own) * 6);
    spec.prompt = prefix;
    for (int i = 0; i < own; ++i) {
      if (i > 0) spec.prompt += ' ';
      spec.prompt += kWords[static_cast<size_t>(rng.NextInt(0, kWords.size() - 1))];
    }
  }
  return prompts;
}

std::vector<double> PoissonArrivalOffsets(int num_arrivals, double rate, uint64_t seed) {
  std::vector<double> offsets(static_cast<size_t>(std::max(0, num_arrivals)), 0.0);
  if (std::isinf(rate)) return offsets;
  Rng rng(seed);
  for (size_t i = 1; i < offsets.size(); ++i) offsets[i] = offsets[i - 1] + rng.NextExponential(rate);
  return offsets;
}

}  // namespace peregrine::bench_client
