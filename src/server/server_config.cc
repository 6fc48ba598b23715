#include "server/server_config.h"

namespace peregrine::server {

Status ValidateServerConfig(const ServerConfig& c) {
  const ServerLimits& l = c.limits;
  if (c.host.empty()) return InvalidArgument("server host is empty");
  if (c.model_name.empty()) return InvalidArgument("served model name is empty");
  if (c.num_io_threads < 1 || c.num_io_threads > 256) {
    return InvalidArgument("num_io_threads must be in [1, 256]");
  }
  if (c.num_worker_threads < 1 || c.num_worker_threads > 256) {
    return InvalidArgument("num_worker_threads must be in [1, 256]");
  }
  if (c.retry_after_seconds < 1) return InvalidArgument("retry_after_seconds must be >= 1");
  if (l.max_body_bytes < 1024) return InvalidArgument("max_body_bytes must be >= 1024");
  if (l.max_header_bytes < 1024) return InvalidArgument("max_header_bytes must be >= 1024");
  if (l.max_header_fields < 8) return InvalidArgument("max_header_fields must be >= 8");
  if (l.max_connections < 1) return InvalidArgument("max_connections must be >= 1");
  if (l.max_concurrent_requests < 1) {
    return InvalidArgument("max_concurrent_requests must be >= 1");
  }
  if (l.max_waiting_requests < 0) return InvalidArgument("max_waiting_requests must be >= 0");
  if (l.max_n < 1 || l.max_choices < l.max_n) {
    return InvalidArgument("max_n must be >= 1 and max_choices >= max_n");
  }
  if (l.max_stop_strings < 0 || l.max_stop_token_ids < 0 || l.max_tools < 0) {
    return InvalidArgument("stop and tool limits must be >= 0");
  }
  if (l.max_json_depth < 4 || l.max_json_depth > 1024) {
    return InvalidArgument("max_json_depth must be in [4, 1024]");
  }
  if (c.metrics_port && *c.metrics_port != 0 && *c.metrics_port == c.port) {
    return InvalidArgument("metrics_port must differ from port (leave it unset to share the API port)");
  }
  const ServerTimeouts& t = c.timeouts;
  if (t.idle.count() <= 0 || t.header.count() <= 0 || t.body.count() <= 0 ||
      t.write.count() <= 0 || t.drain.count() < 0 || t.drain_grace.count() < 0) {
    return InvalidArgument("server timeouts must be positive");
  }
  return Status::Ok();
}

}  // namespace peregrine::server
