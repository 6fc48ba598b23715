#include "cli/kv_transfer_setup.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "base/log.h"

namespace peregrine::cli {

namespace {

Result<std::string> ReadSecret(const ServeOptions& options) {
  std::string secret;
  if (!options.disaggregation_secret_file.empty()) {
    std::ifstream in(options.disaggregation_secret_file, std::ios::binary);
    if (!in) return InvalidArgument("cannot read the secret file " + options.disaggregation_secret_file);
    std::ostringstream s;
    s << in.rdbuf();
    secret = s.str();
  } else if (const char* env = std::getenv("PEREGRINE_DISAGGREGATION_SECRET"); env != nullptr) {
    secret = env;
  }
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r')) secret.pop_back();
  if (secret.size() < 16)
    return InvalidArgument(
        "the KV transfer needs the deployment's shared secret of at least 16 bytes "
        "(--disaggregation-secret-file or PEREGRINE_DISAGGREGATION_SECRET)");
  return secret;
}

}  // namespace

Result<KvTransferEnds> StartKvTransfer(const ServeOptions& options) {
  KvTransferEnds ends;
  if (options.disaggregation_mode == "null") return ends;
  PG_ASSIGN_OR_RETURN(const std::string secret, ReadSecret(options));
  if (options.disaggregation_mode == "prefill") {
    disaggregation::KvSenderConfig c;
    c.host = options.disaggregation_bootstrap_host.empty() ? options.server.host : options.disaggregation_bootstrap_host;
    c.port = static_cast<uint16_t>(options.disaggregation_bootstrap_port);
    c.secret = secret;
    c.expiry_s = options.disaggregation_transfer_timeout_s;
    c.max_held_bytes = static_cast<uint64_t>(options.disaggregation_max_held_gb * double(uint64_t{1} << 30));
    if (const char* fault = std::getenv("PEREGRINE_KV_TRANSFER_FAULT"); fault != nullptr) c.fault = fault;
    PG_ASSIGN_OR_RETURN(ends.sender, disaggregation::KvSender::Start(c));
    LogInfo("KV transfer (UCX) on {}:{}{}", c.host, ends.sender->port(), c.fault.empty() ? "" : " with fault " + c.fault);
  } else {
    disaggregation::KvReceiverConfig c;
    c.secret = secret;
    c.timeout_s = options.disaggregation_transfer_timeout_s;
    PG_ASSIGN_OR_RETURN(ends.receiver, disaggregation::KvReceiver::Start(c));
  }
  return ends;
}

}  // namespace peregrine::cli
