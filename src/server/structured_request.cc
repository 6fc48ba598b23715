#include "server/structured_request.h"

#include <span>
#include <utility>
#include <vector>

#include "chat/tool_call_grammar.h"
#include "server/openai_fields.h"

namespace peregrine::server {
namespace {

using structured::GrammarKind;
using structured::GrammarSpec;

constexpr size_t kMaxChoices = 1024;

ApiError Invalid(const std::string& param, const std::string& what) {
  return InvalidRequest("'" + param + "' " + what, param, "invalid_value");
}

// Takes `spec` as the request's constraint unless another one was given already.
std::optional<ApiError> Set(GrammarSpec spec, const char* param, const ServerLimits& limits,
                            StructuredRequest* out) {
  if (out->spec) {
    return InvalidRequest(std::string("Only one structured output constraint may be given; '") + param +
                              "' comes on top of '" + out->param + "'.",
                          param, "invalid_value");
  }
  size_t bytes = spec.source.size();
  for (const std::string& c : spec.choices) bytes += c.size();
  if (bytes > limits.max_grammar_bytes) return Invalid(param, "is too large.");
  out->spec = std::move(spec);
  out->param = param;
  return std::nullopt;
}

// A JSON value given as an object or as its text (vLLM accepts both for schemas).
std::optional<ApiError> ReadJsonValue(const Json& value, const char* param, Json* out) {
  if (value.is_string()) {
    Json parsed = Json::parse(value.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) return Invalid(param, "is not valid JSON.");
    *out = std::move(parsed);
  } else {
    *out = value;
  }
  if (!out->is_object() && !out->is_boolean()) return Invalid(param, "must be a JSON schema object.");
  return std::nullopt;
}

std::optional<ApiError> SetSchema(const Json& schema, const char* param, bool any_whitespace,
                                  const ServerLimits& limits, StructuredRequest* out) {
  Json parsed;
  if (auto e = ReadJsonValue(schema, param, &parsed)) return e;
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.source = parsed.dump();
  spec.any_whitespace = any_whitespace;
  return Set(std::move(spec), param, limits, out);
}

std::optional<ApiError> SetString(const Json& value, const char* param, GrammarKind kind,
                                  const ServerLimits& limits, StructuredRequest* out) {
  if (!value.is_string()) return Invalid(param, "must be a string.");
  if (value.get_ref<const std::string&>().empty()) return Invalid(param, "must not be empty.");
  GrammarSpec spec;
  spec.kind = kind;
  spec.source = value.get<std::string>();
  return Set(std::move(spec), param, limits, out);
}

std::optional<ApiError> SetChoice(const Json& value, const char* param, const ServerLimits& limits,
                                  StructuredRequest* out) {
  if (!value.is_array() || value.empty()) return Invalid(param, "must be a non-empty array of strings.");
  if (value.size() > kMaxChoices) return Invalid(param, "has too many entries.");
  GrammarSpec spec;
  spec.kind = GrammarKind::kChoice;
  for (const Json& c : value) {
    if (!c.is_string()) return Invalid(param, "must be a non-empty array of strings.");
    spec.choices.push_back(c.get<std::string>());
  }
  return Set(std::move(spec), param, limits, out);
}

std::optional<ApiError> SetJsonObject(const char* param, bool any_whitespace, const ServerLimits& limits,
                                      StructuredRequest* out) {
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonObject;
  spec.any_whitespace = any_whitespace;
  return Set(std::move(spec), param, limits, out);
}

// A structural tag: {"format": {...}} as xgrammar reads it, or the older {"structures":
// [{"begin", "schema", "end"}], "triggers": [...]} that vLLM also accepts.
std::optional<ApiError> SetStructuralTag(const Json& tag, const char* param, const ServerLimits& limits,
                                         StructuredRequest* out) {
  Json value;
  if (tag.is_string()) {
    value = Json::parse(tag.get_ref<const std::string&>(), nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) return Invalid(param, "is not valid JSON.");
  } else {
    value = tag;
  }
  if (!value.is_object()) return Invalid(param, "must be an object.");
  Json normal;
  if (const Json* format = FindField(value, "format")) {
    if (!format->is_object()) return Invalid(param, "must have an object 'format'.");
    normal = Json{{"type", "structural_tag"}, {"format", *format}};
  } else {
    const Json* structures = FindField(value, "structures");
    const Json* triggers = FindField(value, "triggers");
    if (structures == nullptr || !structures->is_array() || structures->empty() || triggers == nullptr ||
        !triggers->is_array() || triggers->empty()) {
      return Invalid(param, "must have a 'format', or 'structures' and 'triggers'.");
    }
    Json tags = Json::array();
    for (const Json& s : *structures) {
      const Json* begin = s.is_object() ? FindField(s, "begin") : nullptr;
      const Json* end = s.is_object() ? FindField(s, "end") : nullptr;
      const Json* schema = s.is_object() ? FindField(s, "schema") : nullptr;
      if (begin == nullptr || !begin->is_string() || end == nullptr || !end->is_string()) {
        return Invalid(param, "structures need string 'begin' and 'end'.");
      }
      Json content = schema != nullptr ? Json{{"type", "json_schema"}, {"json_schema", *schema}}
                                       : Json{{"type", "any_text"}};
      tags.push_back(Json{{"type", "tag"}, {"begin", *begin}, {"content", std::move(content)}, {"end", *end}});
    }
    for (const Json& t : *triggers)
      if (!t.is_string() || t.get_ref<const std::string&>().empty())
        return Invalid(param, "triggers must be non-empty strings.");
    normal = Json{{"type", "structural_tag"},
                  {"format", Json{{"type", "triggered_tags"}, {"triggers", *triggers}, {"tags", std::move(tags)}}}};
  }
  GrammarSpec spec;
  spec.kind = GrammarKind::kStructuralTag;
  spec.source = normal.dump();
  return Set(std::move(spec), param, limits, out);
}

// A field that holds one constraint directly: its key, the name errors give, its kind.
enum class Kind { kSchema, kRegex, kChoice, kEbnf };
struct Spelling {
  const char* key;
  const char* param;
  Kind kind;
};

std::optional<ApiError> ReadSpellings(const Json& object, std::span<const Spelling> spellings, bool any_whitespace,
                                      const ServerLimits& limits, StructuredRequest* out) {
  for (const Spelling& f : spellings) {
    const Json* v = FindField(object, f.key);
    if (v == nullptr) continue;
    std::optional<ApiError> e;
    switch (f.kind) {
      case Kind::kSchema: e = SetSchema(*v, f.param, any_whitespace, limits, out); break;
      case Kind::kRegex: e = SetString(*v, f.param, GrammarKind::kRegex, limits, out); break;
      case Kind::kChoice: e = SetChoice(*v, f.param, limits, out); break;
      case Kind::kEbnf: e = SetString(*v, f.param, GrammarKind::kEbnf, limits, out); break;
    }
    if (e) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> ReadResponseFormat(const Json& format, bool is_chat, const ServerLimits& limits,
                                           StructuredRequest* out) {
  const char* param = "response_format";
  if (!format.is_object()) return Invalid(param, "must be an object with a 'type'.");
  const Json* type = FindField(format, "type");
  if (type == nullptr || !type->is_string()) return Invalid(param, "must be an object with a 'type'.");
  const std::string& t = type->get_ref<const std::string&>();
  if (t == "text") return std::nullopt;
  if (t == "json_object") {
    if (auto e = SetJsonObject(param, true, limits, out)) return e;
  } else if (t == "json_schema") {
    const Json* js = FindField(format, "json_schema");
    if (js == nullptr || !js->is_object()) return Invalid("response_format.json_schema", "must be an object.");
    const Json* schema = FindField(*js, "schema");
    if (schema == nullptr) {
      if (auto e = SetJsonObject(param, true, limits, out)) return e;
    } else if (auto e = SetSchema(*schema, param, true, limits, out)) {
      return e;
    }
  } else if (t == "structural_tag") {
    return SetStructuralTag(format, param, limits, out);
  } else {
    return Invalid("response_format.type", "must be one of text, json_object, json_schema, structural_tag.");
  }
  if (is_chat) out->prompt_format = format;
  return std::nullopt;
}

std::optional<ApiError> ReadStructuredOutputs(const Json& so, const ServerLimits& limits, StructuredRequest* out) {
  const char* param = "structured_outputs";
  if (!so.is_object()) return Invalid(param, "must be an object.");
  bool disable_any_whitespace = false, disable_additional = false, unused = false;
  if (auto e = ReadBool(so, "disable_any_whitespace", &disable_any_whitespace)) return e;
  if (auto e = ReadBool(so, "disable_fallback", &unused)) return e;  // there is no fallback engine
  if (auto e = ReadBool(so, "disable_additional_properties", &disable_additional)) return e;
  if (disable_additional) {
    return InvalidRequest("'structured_outputs.disable_additional_properties' is not supported by this server.",
                          param, "unsupported_parameter");
  }
  if (FindField(so, "whitespace_pattern") != nullptr) {
    return InvalidRequest("'structured_outputs.whitespace_pattern' is not supported by this server.", param,
                          "unsupported_parameter");
  }
  const bool any_ws = !disable_any_whitespace;
  static constexpr Spelling kFields[] = {{"json", "structured_outputs.json", Kind::kSchema},
                                         {"regex", "structured_outputs.regex", Kind::kRegex},
                                         {"choice", "structured_outputs.choice", Kind::kChoice},
                                         {"grammar", "structured_outputs.grammar", Kind::kEbnf}};
  if (auto e = ReadSpellings(so, kFields, any_ws, limits, out)) return e;
  if (const Json* v = FindField(so, "json_object")) {
    if (!v->is_boolean()) return Invalid("structured_outputs.json_object", "must be a boolean.");
    if (v->get<bool>()) {
      if (auto e = SetJsonObject("structured_outputs.json_object", any_ws, limits, out)) return e;
    }
  }
  if (const Json* v = FindField(so, "structural_tag")) {
    if (auto e = SetStructuralTag(*v, "structured_outputs.structural_tag", limits, out)) return e;
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseStructuredOutputs(const Json& body, const ServerLimits& limits, bool is_chat,
                                               StructuredRequest* out) {
  if (const Json* format = FindField(body, "response_format")) {
    if (auto e = ReadResponseFormat(*format, is_chat, limits, out)) return e;
  }
  if (const Json* so = FindField(body, "structured_outputs")) {
    if (auto e = ReadStructuredOutputs(*so, limits, out)) return e;
  }
  // vLLM's older spellings.
  if (FindField(body, "guided_whitespace_pattern") != nullptr) {
    return InvalidRequest("'guided_whitespace_pattern' is not supported by this server.",
                          "guided_whitespace_pattern", "unsupported_parameter");
  }
  if (const Json* backend = FindField(body, "guided_decoding_backend"); backend != nullptr && !backend->is_string()) {
    return Invalid("guided_decoding_backend", "must be a string.");
  }
  static constexpr Spelling kGuided[] = {{"guided_json", "guided_json", Kind::kSchema},
                                         {"guided_regex", "guided_regex", Kind::kRegex},
                                         {"guided_choice", "guided_choice", Kind::kChoice},
                                         {"guided_grammar", "guided_grammar", Kind::kEbnf}};
  if (auto e = ReadSpellings(body, kGuided, true, limits, out)) return e;
  // SGLang's.
  static constexpr Spelling kSglang[] = {{"json_schema", "json_schema", Kind::kSchema},
                                         {"regex", "regex", Kind::kRegex},
                                         {"ebnf", "ebnf", Kind::kEbnf}};
  if (auto e = ReadSpellings(body, kSglang, true, limits, out)) return e;
  return std::nullopt;
}

std::optional<ApiError> ParseToolChoice(const Json& body, ToolChoice* out) {
  if (auto e = ReadBool(body, "parallel_tool_calls", &out->parallel)) return e;
  const Json* tc = FindField(body, "tool_choice");
  if (tc == nullptr) return std::nullopt;
  const char* what = "must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": {\"name\": ...}}.";
  if (tc->is_string()) {
    const std::string& s = tc->get_ref<const std::string&>();
    if (s == "auto") out->mode = ToolChoice::Mode::kAuto;
    else if (s == "none") out->mode = ToolChoice::Mode::kNone;
    else if (s == "required") out->mode = ToolChoice::Mode::kRequired;
    else return Invalid("tool_choice", what);
    return std::nullopt;
  }
  const Json* type = tc->is_object() ? FindField(*tc, "type") : nullptr;
  const Json* function = tc->is_object() ? FindField(*tc, "function") : nullptr;
  const Json* name = function != nullptr && function->is_object() ? FindField(*function, "name") : nullptr;
  if (type == nullptr || *type != "function" || name == nullptr || !name->is_string() ||
      name->get_ref<const std::string&>().empty()) {
    return Invalid("tool_choice", what);
  }
  out->mode = ToolChoice::Mode::kNamed;
  out->name = name->get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> ApplyToolChoice(const ToolChoice& choice, const Json& tools, StructuredRequest* out) {
  if (choice.mode == ToolChoice::Mode::kAuto || choice.mode == ToolChoice::Mode::kNone) return std::nullopt;
  if (!tools.is_array() || tools.empty()) {
    return InvalidRequest("'tool_choice' forces a tool call, which needs 'tools'.", "tool_choice", "invalid_value");
  }
  if (out->spec) {
    return InvalidRequest(std::string("A forced 'tool_choice' cannot be combined with '") + out->param + "'.",
                          "tool_choice", "invalid_value");
  }
  std::vector<chat::GrammarTool> grammar_tools;
  for (const Json& tool : tools) {
    const Json& function = tool.at("function");  // shape checked with the tools
    chat::GrammarTool t;
    t.name = function.at("name").get<std::string>();
    if (choice.mode == ToolChoice::Mode::kNamed && t.name != choice.name) continue;
    if (const Json* p = FindField(function, "parameters")) t.parameters = *p;
    grammar_tools.push_back(std::move(t));
  }
  if (grammar_tools.empty()) {
    return InvalidRequest("'tool_choice' names a function that is not in 'tools'.", "tool_choice", "invalid_value");
  }
  Result<std::string> tag =
      chat::DsmlToolCallStructuralTag(grammar_tools, choice.parallel, structured::kMaxJsonWhitespace);
  if (!tag.ok()) {
    return InvalidRequest("The tools cannot be forced: names must be free of quotes, angle brackets and newlines, "
                          "and parameters must be JSON schema objects.",
                          "tools", "invalid_value");
  }
  GrammarSpec spec;
  spec.kind = GrammarKind::kStructuralTag;
  spec.source = std::move(*tag);
  out->spec = std::move(spec);
  out->param = "tool_choice";
  return std::nullopt;
}

ApiError GrammarError(const Status& status, const StructuredRequest& request) {
  const std::string param = request.param;
  if (status.code() == StatusCode::kDeadlineExceeded) {
    return InvalidRequest("The grammar of '" + param + "' did not compile within the server's time limit.", param,
                          "grammar_too_complex");
  }
  if (status.code() != StatusCode::kInvalidArgument) return FromStatus(status, 1, param);
  const GrammarKind kind = request.spec ? request.spec->kind : GrammarKind::kJsonObject;
  std::string what;
  switch (kind) {
    case GrammarKind::kJsonSchema: what = "is not a JSON schema this server can enforce."; break;
    case GrammarKind::kRegex: what = "is not a regular expression this server can enforce."; break;
    case GrammarKind::kEbnf: what = "is not an EBNF grammar this server can read."; break;
    case GrammarKind::kChoice: what = "holds choices this server cannot enforce."; break;
    case GrammarKind::kStructuralTag:
      what = request.param == std::string("tool_choice")
                 ? "forces tools whose parameter schemas this server cannot enforce."
                 : "is not a structural tag this server can enforce.";
      break;
    case GrammarKind::kJsonObject: what = "cannot be enforced."; break;
  }
  return InvalidRequest("'" + param + "' " + what, param, "invalid_grammar");
}

}  // namespace peregrine::server
