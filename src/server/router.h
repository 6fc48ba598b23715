// Router: authentication, then the route table. Public routes (/health, /ready, /metrics)
// skip the API key; every other path, known or not, needs it when one is configured (so
// unknown paths cannot be probed without a key). /metrics is public as in vLLM, so that a
// Prometheus scrape needs no secret; --metrics-port moves it to a listener of its own (for a
// private interface), whose router serves only /metrics and /health.
//
// Authorization: "Bearer <key>", the scheme matched case-insensitively (RFC 7235; vLLM does
// the same, so "bearer <key>" works), one space, then the key compared in constant time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "server/http_message.h"
#include "server/json_text.h"
#include "server/response_channel.h"
#include "server/serving_context.h"

namespace peregrine::server {

// Which listener a router answers for.
enum class RouteSet : uint8_t {
  kApi,      // the API port (with /metrics unless it has a port of its own)
  kMetrics,  // the metrics port: /metrics and /health
};

class Router {
 public:
  explicit Router(std::shared_ptr<ServingContext> context, RouteSet routes = RouteSet::kApi)
      : context_(std::move(context)), routes_(routes) {}

  // Answers now or later through `channel`; never throws.
  void Handle(HttpRequest request, std::shared_ptr<ResponseChannel> channel);

  // The client's x-request-id when it is short printable ASCII without separators, else a
  // fresh one.
  std::string ResolveRequestId(std::string_view client_value) const;

 private:
  bool IsAuthorized(const HttpRequest& request) const;
  Json ModelObject() const;  // the one served model, as /v1/models lists it
  HttpResponse Models() const;
  // /v1/models/{id}: the model object, or 404 model_not_found.
  HttpResponse Model(std::string_view id) const;
  HttpResponse Ready() const;
  HttpResponse Metrics() const;

  std::shared_ptr<ServingContext> context_;
  RouteSet routes_;
};

// True when `header` is "<scheme> <key>" with scheme "bearer" in any case and the key equal
// to `api_key` (constant time in the key's length).
bool IsValidBearer(std::string_view header, std::string_view api_key);

}  // namespace peregrine::server
