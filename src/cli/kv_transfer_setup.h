// The KV transfer's end for `peregrine serve --disaggregation-mode`: a sender bound to the
// bootstrap host and port on a prefill server, a receiver on a decode server, nothing
// otherwise. The shared secret comes from --disaggregation-secret-file or the
// PEREGRINE_DISAGGREGATION_SECRET environment variable; PEREGRINE_KV_TRANSFER_FAULT
// (corrupt|drop) is the fault tests' hook on a prefill server.
#pragma once

#include <memory>

#include "base/status.h"
#include "cli/serve_command.h"
#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"

namespace peregrine::cli {

struct KvTransferEnds {
  std::unique_ptr<disaggregation::KvSender> sender;
  std::unique_ptr<disaggregation::KvReceiver> receiver;
};

// InvalidArgument without a secret (or with an unreadable file); Unavailable when the port
// cannot be bound.
Result<KvTransferEnds> StartKvTransfer(const ServeOptions& options);

}  // namespace peregrine::cli
