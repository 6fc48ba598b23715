#include "chat/jinja_template.h"

#include <exception>
#include <new>
#include <unordered_map>

#include "chat/jinja_ast.h"
#include "chat/jinja_interp.h"
#include "chat/jinja_lexer.h"
#include "chat/jinja_parser.h"

namespace peregrine::chat {

struct JinjaTemplate::Body {
  jinja::NodeList nodes;
};

namespace {

Result<JinjaTemplate::Body> ParseBody(std::string_view source) {
  PG_ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::Tokenize(source, jinja::LexerOptions{}));
  PG_ASSIGN_OR_RETURN(jinja::NodeList nodes, jinja::Parse(tokens));
  return JinjaTemplate::Body{std::move(nodes)};
}

}  // namespace

Result<JinjaTemplate> JinjaTemplate::Parse(std::string_view source) {
  try {
    PG_ASSIGN_OR_RETURN(Body body, ParseBody(source));
    JinjaTemplate tmpl;
    tmpl.body_ = std::make_shared<const Body>(std::move(body));
    return tmpl;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory while parsing a template");
  } catch (const std::exception&) {
    return Internal("template parsing failed");
  }
}

Result<std::string> JinjaTemplate::Render(const nlohmann::ordered_json& context, const JinjaLimits& limits) const {
  if (body_ == nullptr) return InvalidArgument("template was not parsed");
  if (!context.is_object() && !context.is_null()) return InvalidArgument("template context must be a JSON object");
  try {
    std::unordered_map<std::string, jinja::Value> globals;
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) {
        PG_ASSIGN_OR_RETURN(jinja::Value v, jinja::FromJson(it.value()));
        globals[it.key()] = std::move(v);
      }
    }
    jinja::Interpreter interpreter(limits);
    std::string out;
    PG_RETURN_IF_ERROR(interpreter.Run(body_->nodes, std::move(globals), out));
    return out;
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("out of memory while rendering a template");
  } catch (const std::exception&) {
    return Internal("template rendering failed");
  }
}

Result<std::string> RenderChatTemplate(const JinjaTemplate& tmpl, const nlohmann::ordered_json& messages,
                                       const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                       const nlohmann::ordered_json& extra, const JinjaLimits& limits) {
  if (!extra.is_null() && !extra.is_object()) return InvalidArgument("template variables must be a JSON object");
  try {
    nlohmann::ordered_json context = nlohmann::ordered_json::object();
    context["messages"] = messages;
    context["tools"] = tools.is_array() ? tools : nlohmann::ordered_json();
    context["documents"] = nullptr;
    context["add_generation_prompt"] = add_generation_prompt;
    if (extra.is_object())
      for (auto it = extra.begin(); it != extra.end(); ++it) context[it.key()] = it.value();
    return tmpl.Render(context, limits);
  } catch (const std::exception&) {
    return Internal("template rendering failed");
  }
}

}  // namespace peregrine::chat
