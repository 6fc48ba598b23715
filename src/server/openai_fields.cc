#include "server/openai_fields.h"

#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include "server/json_parse.h"
#include "tokenizer/utf8.h"

namespace peregrine::server {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

ApiError TypeError(const char* key, const char* what) {
  return InvalidRequest(std::string("'") + key + "' must be " + what + ".", key, "invalid_type");
}

ApiError RangeError(const char* key) {
  return InvalidRequest(std::string("'") + key + "' is out of range.", key);
}

ApiError Unsupported(const char* key) {
  return InvalidRequest(std::string("'") + key + "' is not supported by this server.", key,
                        "unsupported_parameter");
}

// Deepest nesting of arrays/objects in `text` (strings skipped); stops counting past `limit`.
bool IsNestingWithin(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<ApiError> ReadTokenId(const Json& value, const char* key, int64_t vocab_size,
                                    int32_t* out) {
  const std::optional<int64_t> id = AsInt64(value);
  if (!id) return TypeError(key, "an array of token ids");
  if (*id < 0 || *id >= vocab_size) {
    return InvalidRequest(std::string("'") + key + "' contains an invalid token id.", key,
                          "invalid_token_id");
  }
  *out = static_cast<int32_t>(*id);
  return std::nullopt;
}

std::optional<ApiError> ReadLogitBias(const Json& body, int64_t vocab_size,
                                      SamplingParams* sampling) {
  const Json* bias = FindField(body, "logit_bias");
  if (bias == nullptr) return std::nullopt;
  if (!bias->is_object()) return TypeError("logit_bias", "an object");
  if (bias->size() > kMaxLogitBiasEntries) {
    return InvalidRequest("'logit_bias' has too many entries.", "logit_bias");
  }
  sampling->logit_bias.reserve(bias->size());
  for (const auto& [key, value] : bias->items()) {
    int64_t id = 0;
    const bool is_digits = !key.empty() && key.size() <= 10 &&
                           key.find_first_not_of("0123456789") == std::string::npos;
    if (is_digits) id = std::stoll(key);
    if (!is_digits || id >= vocab_size) {
      return InvalidRequest("'logit_bias' keys must be valid token ids.", "logit_bias");
    }
    if (!value.is_number() || !std::isfinite(value.get<double>()) ||
        std::fabs(value.get<double>()) > 100.0) {
      return InvalidRequest("'logit_bias' values must be numbers in [-100, 100].", "logit_bias");
    }
    sampling->logit_bias.emplace_back(static_cast<int32_t>(id), value.get<float>());
  }
  return std::nullopt;
}

std::optional<ApiError> ReadStop(const Json& body, const ServerLimits& limits,
                                 std::vector<std::string>* out) {
  const Json* stop = FindField(body, "stop");
  if (stop == nullptr) return std::nullopt;
  auto add = [&](const Json& s) -> std::optional<ApiError> {
    if (!s.is_string()) return TypeError("stop", "a string or an array of strings");
    const auto& text = s.get_ref<const std::string&>();
    if (text.size() > limits.max_stop_string_bytes) {
      return InvalidRequest("'stop' strings are too long.", "stop");
    }
    if (!text.empty()) out->push_back(text);
    return std::nullopt;
  };
  if (stop->is_string()) return add(*stop);
  if (!stop->is_array()) return TypeError("stop", "a string or an array of strings");
  if (stop->size() > static_cast<size_t>(limits.max_stop_strings)) {
    return InvalidRequest("'stop' has too many entries.", "stop");
  }
  for (const Json& s : *stop) {
    if (auto e = add(s)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> RejectUnsupported(const Json& body) {
  for (const char* key : {"allowed_token_ids", "bad_words", "logits_processors"}) {
    if (FindField(body, key) != nullptr) return Unsupported(key);
  }
  bool beam = false;
  if (auto e = ReadBool(body, "use_beam_search", &beam)) return e;
  if (beam) return Unsupported("use_beam_search");
  return std::nullopt;
}

}  // namespace

const Json* FindField(const Json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> AsInt64(const Json& value) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(kInt64Max)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (value.is_number_float()) {
    const double d = value.get<double>();
    // 2^63 is exactly representable; everything below it converts without overflow.
    if (!std::isfinite(d) || d != std::floor(d) || d >= 9223372036854775808.0 ||
        d < -9223372036854775808.0) {
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const Json& object, const char* key, bool* out) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_boolean()) return TypeError(key, "a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const Json& object, const char* key, int64_t min, int64_t max,
                                std::optional<int64_t>* out) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return TypeError(key, "an integer");
  const std::optional<int64_t> i = AsInt64(*v);
  if (!i) {
    // Integral but beyond int64 is a range problem; anything else a type problem.
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d)) return RangeError(key);
    return TypeError(key, "an integer");
  }
  if (*i < min || *i > max) return RangeError(key);
  *out = *i;
  return std::nullopt;
}

std::optional<ApiError> ReadFloat(const Json& object, const char* key, double min, double max,
                                  bool min_exclusive, float* out) {
  const Json* v = FindField(object, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) return TypeError(key, "a number");
  const double d = v->get<double>();
  if (!std::isfinite(d) || d > max || d < min || (min_exclusive && d == min)) {
    return RangeError(key);
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

std::optional<ApiError> ParseJsonBody(std::string_view body, int max_depth, Json* out) {
  if (body.empty()) return InvalidRequest("The request body is empty.", "", "invalid_json");
  if (!tokenizer::IsValidUtf8(body)) {
    return InvalidRequest("The request body is not valid UTF-8.", "", "invalid_encoding");
  }
  if (!IsNestingWithin(body, max_depth)) {
    return InvalidRequest("The request body is nested too deeply.", "", "invalid_json");
  }
  std::optional<Json> parsed = ParseJsonLinear(body);
  if (!parsed) return InvalidRequest("The request body is not valid JSON.", "", "invalid_json");
  *out = std::move(*parsed);
  if (!out->is_object()) {
    return InvalidRequest("The request body must be a JSON object.", "", "invalid_json");
  }
  return std::nullopt;
}

namespace {

// SGLang's bootstrap_host / bootstrap_port / bootstrap_room: all three or none.
std::optional<ApiError> ReadBootstrap(const Json& body, std::optional<Bootstrap>* out) {
  const Json* host = FindField(body, "bootstrap_host");
  const bool has_port = FindField(body, "bootstrap_port") != nullptr;
  const bool has_room = FindField(body, "bootstrap_room") != nullptr;
  if (host == nullptr && !has_port && !has_room) return std::nullopt;
  if (host == nullptr || !has_port || !has_room) {
    return InvalidRequest("'bootstrap_host', 'bootstrap_port' and 'bootstrap_room' go together.", "bootstrap_room");
  }
  if (!host->is_string() || host->get_ref<const std::string&>().empty() || host->get_ref<const std::string&>().size() > 255)
    return TypeError("bootstrap_host", "a host name or address");
  std::optional<int64_t> port, room;
  if (auto e = ReadInt(body, "bootstrap_port", 1, 65535, &port)) return e;
  if (auto e = ReadInt(body, "bootstrap_room", 0, kInt64Max, &room)) return e;
  *out = Bootstrap{host->get<std::string>(), static_cast<uint16_t>(*port), static_cast<uint64_t>(*room)};
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseGenerationOptions(const Json& body, const ParseContext& context,
                                               bool is_chat, GenerationOptions* out) {
  const ServerConfig& config = *context.config;
  const ServerLimits& limits = config.limits;
  if (const Json* model = FindField(body, "model")) {
    if (!model->is_string()) return TypeError("model", "a string");
    if (model->get_ref<const std::string&>() != config.model_name) {
      return NotFound("The model does not exist.", "model_not_found");
    }
  }
  // n first: nothing sized by the request is allocated before it is bounded.
  std::optional<int64_t> n;
  if (auto e = ReadInt(body, "n", 1, limits.max_n, &n)) return e;
  out->n = static_cast<int>(n.value_or(1));
  std::optional<int64_t> best_of;
  if (auto e = ReadInt(body, "best_of", 1, limits.max_n, &best_of)) return e;
  if (best_of && *best_of != out->n) return Unsupported("best_of");
  if (auto e = RejectUnsupported(body)) return e;
  if (auto e = ParseStructuredOutputs(body, limits, is_chat, &out->structured)) return e;

  std::optional<int64_t> max_tokens;
  const char* max_key = "max_tokens";
  if (is_chat && FindField(body, "max_completion_tokens") != nullptr) {
    max_key = "max_completion_tokens";
  }
  if (auto e = ReadInt(body, max_key, 0, kInt64Max, &max_tokens)) return e;
  out->max_tokens = max_tokens;
  std::optional<int64_t> min_tokens;
  if (auto e = ReadInt(body, "min_tokens", 0, std::numeric_limits<int32_t>::max(), &min_tokens)) return e;
  if (min_tokens && max_tokens && *min_tokens > *max_tokens) {
    return InvalidRequest("'min_tokens' must not exceed 'max_tokens'.", "min_tokens", "invalid_value");
  }
  out->sampling.min_tokens = static_cast<int32_t>(min_tokens.value_or(0));

  SamplingParams& s = out->sampling;
  if (auto e = ReadFloat(body, "temperature", 0.0, 2.0, false, &s.temperature)) return e;
  if (auto e = ReadFloat(body, "top_p", 0.0, 1.0, true, &s.top_p)) return e;
  if (auto e = ReadFloat(body, "min_p", 0.0, 1.0, false, &s.min_p)) return e;
  if (auto e = ReadFloat(body, "presence_penalty", -2.0, 2.0, false, &s.presence_penalty)) return e;
  if (auto e = ReadFloat(body, "frequency_penalty", -2.0, 2.0, false, &s.frequency_penalty)) {
    return e;
  }
  if (auto e = ReadFloat(body, "repetition_penalty", 0.0, 2.0, true, &s.repetition_penalty)) {
    return e;
  }
  std::optional<int64_t> top_k;
  if (auto e = ReadInt(body, "top_k", -1, context.vocab_size, &top_k)) return e;
  if (top_k) s.top_k = static_cast<int32_t>(*top_k);
  std::optional<int64_t> seed;
  if (auto e = ReadInt(body, "seed", kInt64Min, kInt64Max, &seed)) return e;
  if (seed) s.seed = static_cast<uint64_t>(*seed);
  if (auto e = ReadLogitBias(body, context.vocab_size, &s)) return e;
  // vLLM's prompt_logprobs (its -1, the whole vocabulary, is not offered).
  std::optional<int64_t> prompt_logprobs;
  if (auto e = ReadInt(body, "prompt_logprobs", 0, kMaxTopLogprobs, &prompt_logprobs)) return e;
  out->prompt_logprobs = static_cast<int32_t>(prompt_logprobs.value_or(-1));

  if (auto e = ReadStop(body, limits, &out->stop)) return e;
  if (const Json* ids = FindField(body, "stop_token_ids")) {
    if (!ids->is_array()) return TypeError("stop_token_ids", "an array of token ids");
    if (ids->size() > static_cast<size_t>(limits.max_stop_token_ids)) {
      return InvalidRequest("'stop_token_ids' has too many entries.", "stop_token_ids");
    }
    out->stop_token_ids.resize(ids->size());
    for (size_t i = 0; i < ids->size(); ++i) {
      if (auto e = ReadTokenId((*ids)[i], "stop_token_ids", context.vocab_size,
                               &out->stop_token_ids[i])) {
        return e;
      }
    }
  }
  if (auto e = ReadBool(body, "ignore_eos", &out->ignore_eos)) return e;
  if (const Json* salt = FindField(body, "cache_salt")) {
    // A tenant's namespace in the prefix cache: requests only share cached blocks with
    // requests of the same salt.
    if (!salt->is_string()) return TypeError("cache_salt", "a string");
    const std::string& v = salt->get_ref<const std::string&>();
    if (v.empty() || v.size() > 1024) {
      return InvalidRequest("'cache_salt' must be a non-empty string of at most 1024 bytes.", "cache_salt");
    }
    out->cache_salt = v;
  }
  if (auto e = ReadBootstrap(body, &out->bootstrap)) return e;
  if (auto e = ReadBool(body, "skip_special_tokens", &out->skip_special_tokens)) return e;
  if (auto e = ReadBool(body, "include_stop_str_in_output", &out->include_stop_str_in_output)) {
    return e;
  }
  if (auto e = ReadBool(body, "stream", &out->stream)) return e;
  if (const Json* so = FindField(body, "stream_options")) {
    if (!so->is_object()) return TypeError("stream_options", "an object");
    if (!out->stream) {
      return InvalidRequest("'stream_options' is only allowed when 'stream' is true.",
                            "stream_options");
    }
    if (auto e = ReadBool(*so, "include_usage", &out->include_usage)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> ReadTokenIdArray(const Json& value, const char* key, int64_t vocab_size,
                                         std::vector<int32_t>* out) {
  if (!value.is_array()) return TypeError(key, "an array of token ids");
  out->resize(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    if (auto e = ReadTokenId(value[i], key, vocab_size, &(*out)[i])) return e;
  }
  return std::nullopt;
}

}  // namespace peregrine::server
