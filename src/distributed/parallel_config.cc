#include "distributed/parallel_config.h"

#include <charconv>

namespace peregrine::distributed {

ShardRange EvenShard(int64_t n, int rank, int size) {
  const int64_t part = n / size;
  return {part * rank, part * (rank + 1)};
}

ShardRange PaddedShard(int64_t n, int rank, int size) {
  const int64_t part = (n + size - 1) / size;
  const int64_t begin = std::min(n, part * rank);
  return {begin, std::min(n, begin + part)};
}

Status ParseHostPort(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size())
    return InvalidArgument("--dist-init-addr must be host:port, got '" + address + "'");
  int value = 0;
  const char* first = address.data() + colon + 1;
  const char* last = address.data() + address.size();
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end != last || value <= 0 || value > 65535)
    return InvalidArgument("--dist-init-addr has no valid port: '" + address + "'");
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  *port = value;
  return Status::Ok();
}

Status ValidateParallelConfig(const ParallelConfig& c) {
  if (c.tp_size < 1 || c.tp_size > 64) return InvalidArgument("--tp must be between 1 and 64");
  if (c.nnodes < 1) return InvalidArgument("--nnodes must be at least 1");
  if (c.tp_size % c.nnodes != 0) return InvalidArgument("--tp must be a multiple of --nnodes");
  if (c.node_rank < 0 || c.node_rank >= c.nnodes) return InvalidArgument("--node-rank must be in [0, --nnodes)");
  if (c.nnodes > 1 && c.dist_init_addr.empty())
    return InvalidArgument("--nnodes > 1 needs --dist-init-addr (the first node's host:port)");
  if (!c.dist_init_addr.empty()) {
    std::string host;
    int port = 0;
    PG_RETURN_IF_ERROR(ParseHostPort(c.dist_init_addr, &host, &port));
  }
  return Status::Ok();
}

}  // namespace peregrine::distributed
