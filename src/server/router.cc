#include "server/router.h"

#include <chrono>
#include <utility>

#include "base/version.h"
#include "server/api_error.h"
#include "server/generation_route.h"
#include "server/tokenize_handler.h"

namespace peregrine::server {
namespace {

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = (a[i] >= 'A' && a[i] <= 'Z') ? static_cast<char>(a[i] + 32) : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

HttpResponse MethodNotAllowed(const char* allow) {
  ApiError e;
  e.status = 405;
  e.message = "Method not allowed.";
  e.code = "method_not_allowed";
  HttpResponse r = ErrorResponse(e);
  r.headers.emplace_back("allow", allow);
  return r;
}

constexpr std::string_view kModelsPrefix = "/v1/models/";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; a malformed escape is kept as it is.
std::string PercentDecoded(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int hi = text[i] == '%' && i + 2 < text.size() ? HexValue(text[i + 1]) : -1;
    const int lo = hi >= 0 ? HexValue(text[i + 2]) : -1;
    if (lo < 0) {
      out += text[i];
      continue;
    }
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

HttpResponse JsonResponse(int status, const Json& body) {
  HttpResponse r;
  r.status = status;
  r.body = DumpJson(body);
  return r;
}

}  // namespace

bool IsValidBearer(std::string_view header, std::string_view api_key) {
  const size_t space = header.find(' ');
  if (space == std::string_view::npos) return false;
  if (!EqualsIgnoreCase(header.substr(0, space), "bearer")) return false;
  const std::string_view key = header.substr(space + 1);
  // Every byte of the configured key is compared whatever the input, so the time does not
  // tell how much of a guess was right.
  unsigned diff = key.size() == api_key.size() ? 0u : 1u;
  for (size_t i = 0; i < api_key.size(); ++i) {
    const char c = i < key.size() ? key[i] : '\0';
    diff |= static_cast<unsigned>(static_cast<unsigned char>(c) ^
                                  static_cast<unsigned char>(api_key[i]));
  }
  return diff == 0 && !api_key.empty();
}

std::string Router::ResolveRequestId(std::string_view client_value) const {
  bool ok = !client_value.empty() && client_value.size() <= 128;
  for (char c : client_value) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' || c == ':';
    ok = ok && allowed;
  }
  return ok ? std::string(client_value) : context_->NewId("req-");
}

bool Router::IsAuthorized(const HttpRequest& request) const {
  const std::string& key = context_->config.api_key;
  return key.empty() || IsValidBearer(request.Header("authorization"), key);
}

Json Router::ModelObject() const {
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string& name = context_->config.model_name;
  return {{"id", name},          {"object", "model"},   {"created", created},
          {"owned_by", "peregrine"}, {"root", name},    {"parent", nullptr},
          {"max_model_len", context_->engine.max_context()}};
}

HttpResponse Router::Models() const {
  return JsonResponse(200, Json{{"object", "list"}, {"data", Json::array({ModelObject()})}});
}

HttpResponse Router::Model(std::string_view id) const {
  // An id with a slash ("org/name") may come percent-encoded ("org%2Fname").
  if (id != context_->config.model_name && PercentDecoded(id) != context_->config.model_name) {
    return ErrorResponse(NotFound("The model does not exist.", "model_not_found"));
  }
  return JsonResponse(200, ModelObject());
}

HttpResponse Router::Ready() const {
  if (context_->is_draining()) return JsonResponse(503, Json{{"status", "draining"}});
  if (!context_->engine.Stats().is_ready) return JsonResponse(503, Json{{"status", "not_ready"}});
  return JsonResponse(200, Json{{"status", "ready"}});
}

HttpResponse Router::Metrics() const {
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = context_->metrics.Render(context_->engine.Stats());
  return r;
}

void Router::Handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
  try {
    const std::string& path = request.path;
    const bool is_get = request.method == "GET";
    const bool is_post = request.method == "POST";
    if (path == "/health") {
      if (!is_get) return channel->Respond(MethodNotAllowed("GET, HEAD"));
      HttpResponse r;
      r.content_type = "text/plain";
      return channel->Respond(std::move(r));
    }
    const bool serves_metrics = routes_ == RouteSet::kMetrics || !context_->config.metrics_port;
    if (path == "/metrics" && serves_metrics) {
      if (!is_get) return channel->Respond(MethodNotAllowed("GET, HEAD"));
      return channel->Respond(Metrics());
    }
    if (routes_ == RouteSet::kMetrics) return channel->Respond(ErrorResponse(NotFound("Not found.", "not_found")));
    if (path == "/ready") {
      if (!is_get) return channel->Respond(MethodNotAllowed("GET, HEAD"));
      return channel->Respond(Ready());
    }
    if (!IsAuthorized(request)) return channel->Respond(ErrorResponse(Unauthorized()));
    if (path == "/v1/chat/completions" || path == "/v1/completions") {
      if (!is_post) return channel->Respond(MethodNotAllowed("POST"));
      if (path == "/v1/completions") {
        return HandleCompletions(context_, std::move(request), std::move(channel));
      }
      return HandleChatCompletions(context_, std::move(request), std::move(channel));
    }
    if (path == "/v1/models") {
      if (!is_get) return channel->Respond(MethodNotAllowed("GET, HEAD"));
      return channel->Respond(Models());
    }
    if (path.starts_with(kModelsPrefix) && path.size() > kModelsPrefix.size()) {
      if (!is_get) return channel->Respond(MethodNotAllowed("GET, HEAD"));
      return channel->Respond(Model(std::string_view(path).substr(kModelsPrefix.size())));
    }
    if (path == "/tokenize" || path == "/detokenize") {
      if (!is_post) return channel->Respond(MethodNotAllowed("POST"));
      if (path == "/tokenize") return HandleTokenize(context_, std::move(request), std::move(channel));
      return HandleDetokenize(context_, std::move(request), std::move(channel));
    }
    if (path == "/version") {
      if (!is_get) return channel->Respond(MethodNotAllowed("GET, HEAD"));
      return channel->Respond(JsonResponse(200, Json{{"version", kVersion}}));
    }
    channel->Respond(ErrorResponse(NotFound("Not found.", "not_found")));
  } catch (...) {  // nothing may escape into the connection's event loop
    channel->Respond(ErrorResponse(InternalError("The server failed to handle the request.")));
  }
}

}  // namespace peregrine::server
