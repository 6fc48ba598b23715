#include "server/logprobs_format.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace peregrine::server {
namespace {

double Finite(float logprob) { return std::isfinite(logprob) ? logprob : -9999.0; }

std::string TokenText(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  const int32_t ids[] = {id};
  return tokenizer.Decode(ids, /*skip_special_tokens=*/false);
}

Json TokenBytes(const tokenizer::Tokenizer& tokenizer, int32_t id) {
  Json bytes = Json::array();
  for (unsigned char c : tokenizer.TokenBytes(id)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

int64_t CodePoints(std::string_view text) {
  int64_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

Json ChatLogprobsContent(const tokenizer::Tokenizer& tokenizer,
                         std::span<const SampleResult> samples, int num_top) {
  Json content = Json::array();
  for (const SampleResult& s : samples) {
    Json top = Json::array();
    const size_t k = std::min(s.top_logprobs.size(), static_cast<size_t>(std::max(num_top, 0)));
    for (size_t i = 0; i < k; ++i) {
      const TokenLogprob& t = s.top_logprobs[i];
      top.push_back(Json{{"token", TokenText(tokenizer, t.token)},
                         {"logprob", Finite(t.logprob)},
                         {"bytes", TokenBytes(tokenizer, t.token)}});
    }
    content.push_back(Json{{"token", TokenText(tokenizer, s.token)},
                           {"logprob", Finite(s.logprob)},
                           {"bytes", TokenBytes(tokenizer, s.token)},
                           {"top_logprobs", std::move(top)}});
  }
  return content;
}

void AppendCompletionLogprobs(const tokenizer::Tokenizer& tokenizer,
                              std::span<const SampleResult> samples, int num_top,
                              int64_t* text_offset, Json* logprobs) {
  if (logprobs->is_null()) {
    *logprobs = Json{{"text_offset", Json::array()},
                     {"token_logprobs", Json::array()},
                     {"tokens", Json::array()},
                     {"top_logprobs", Json::array()}};
  }
  for (const SampleResult& s : samples) {
    std::string text = TokenText(tokenizer, s.token);
    (*logprobs)["text_offset"].push_back(*text_offset);
    *text_offset += CodePoints(text);
    (*logprobs)["token_logprobs"].push_back(Finite(s.logprob));
    // The chosen token first, then the alternatives (a later duplicate keeps the first value).
    Json top = Json::object();
    top[text] = Finite(s.logprob);
    const size_t k = std::min(s.top_logprobs.size(), static_cast<size_t>(std::max(num_top, 0)));
    for (size_t i = 0; i < k; ++i) {
      std::string alt = TokenText(tokenizer, s.top_logprobs[i].token);
      if (!top.contains(alt)) top[alt] = Finite(s.top_logprobs[i].logprob);
    }
    (*logprobs)["tokens"].push_back(std::move(text));
    (*logprobs)["top_logprobs"].push_back(std::move(top));
  }
}

void AppendEchoLogprobs(const tokenizer::Tokenizer& tokenizer, int32_t first_token,
                        std::span<const SampleResult> prompt_scores, int num_top,
                        int64_t* text_offset, Json* logprobs) {
  if (logprobs->is_null()) AppendCompletionLogprobs(tokenizer, {}, num_top, text_offset, logprobs);
  std::string text = TokenText(tokenizer, first_token);
  (*logprobs)["text_offset"].push_back(*text_offset);
  *text_offset += CodePoints(text);
  (*logprobs)["token_logprobs"].push_back(nullptr);
  (*logprobs)["tokens"].push_back(std::move(text));
  (*logprobs)["top_logprobs"].push_back(nullptr);
  AppendCompletionLogprobs(tokenizer, prompt_scores, num_top, text_offset, logprobs);
}

Json PromptLogprobsJson(const tokenizer::Tokenizer& tokenizer,
                        std::span<const SampleResult> prompt_scores, int num_top) {
  Json list = Json::array();
  list.push_back(nullptr);
  for (const SampleResult& s : prompt_scores) {
    Json entry = Json::object();
    entry[std::to_string(s.token)] = Json{{"logprob", Finite(s.logprob)}, {"rank", s.rank},
                                          {"decoded_token", TokenText(tokenizer, s.token)}};
    const size_t k = std::min(s.top_logprobs.size(), static_cast<size_t>(std::max(num_top, 0)));
    for (size_t i = 0; i < k; ++i) {
      const TokenLogprob& t = s.top_logprobs[i];
      const std::string key = std::to_string(t.token);
      if (entry.contains(key)) continue;
      entry[key] = Json{{"logprob", Finite(t.logprob)}, {"rank", static_cast<int64_t>(i) + 1},
                        {"decoded_token", TokenText(tokenizer, t.token)}};
    }
    list.push_back(std::move(entry));
  }
  return list;
}

}  // namespace peregrine::server
