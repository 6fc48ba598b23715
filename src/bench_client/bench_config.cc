#include "bench_client/bench_config.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include <nlohmann/json.hpp>

#include "bench_client/base_url.h"

namespace peregrine::bench_client {

Status ValidateBenchConfig(const BenchConfig& config) {
  PG_RETURN_IF_ERROR(ParseBaseUrl(config.base_url).status());
  if (!config.endpoint.starts_with('/')) return InvalidArgument("endpoint must start with '/': " + config.endpoint);
  PG_RETURN_IF_ERROR(ValidateWorkload(config.workload));
  if (!config.concurrencies.empty() && !config.request_rates.empty()) {
    return InvalidArgument("give a concurrency sweep or a request-rate sweep, not both");
  }
  for (int c : config.concurrencies) {
    if (c < 1) return InvalidArgument("concurrency must be at least 1");
  }
  for (double r : config.request_rates) {
    if (!(r > 0)) return InvalidArgument("request rate must be positive (or inf)");
  }
  if (config.max_concurrency < 0) return InvalidArgument("max concurrency must not be negative");
  if (config.num_warmups < 0) return InvalidArgument("warm-up count must not be negative");
  if (config.num_client_threads < 1) return InvalidArgument("client threads must be at least 1");
  if (!(config.request_timeout_s > 0)) return InvalidArgument("request timeout must be positive");
  if (!config.extra_body.empty() &&
      !nlohmann::json::parse(config.extra_body, nullptr, /*allow_exceptions=*/false).is_object()) {
    return InvalidArgument("extra body must be a JSON object");
  }
  return Status::Ok();
}

Result<double> ParseRequestRate(std::string_view text) {
  const std::string s(text);
  if (s == "inf" || s == "INF" || s == "Inf") return std::numeric_limits<double>::infinity();
  char* end = nullptr;
  const double rate = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(rate) || !(rate > 0)) {
    return InvalidArgument("request rate must be a positive number or inf: " + s);
  }
  return rate;
}

}  // namespace peregrine::bench_client
