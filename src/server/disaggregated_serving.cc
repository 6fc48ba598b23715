#include "server/disaggregated_serving.h"

#include <chrono>
#include <utility>

#include "base/log.h"
#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"

namespace peregrine::server {

namespace {

// A decode request waiting for its room.
struct PendingJob {
  std::shared_ptr<ServingContext> context;
  std::shared_ptr<ResponseChannel> channel;
  std::unique_ptr<ResponseFormatter> formatter;
  JobSpec spec;
  std::shared_ptr<void> ticket;
};

void Launch(PendingJob& p) {
  auto job = std::make_shared<GenerationJob>(p.context, p.channel, std::move(p.formatter), std::move(p.spec),
                                             std::move(p.ticket));
  job->Start();
}

// Why a pulled KV cannot be used here (empty: it can).
std::string Mismatch(const TransferredKv& kv, const ServingContext& context, const EngineRequest& request) {
  if (kv.fingerprint != context.engine.kv_fingerprint()) return "the prefill server's KV layout differs from this server's";
  if (kv.prompt_ids != request.prompt_ids) return "the prefill server computed another prompt";
  return {};
}

void Resume(PendingJob& p, Result<TransferredKv> kv, double seconds) {
  ServingContext& context = *p.context;
  if (p.channel->is_client_gone()) return;  // the transfer came too late: nothing to do
  if (context.is_draining()) {
    p.channel->Respond(ErrorResponse(Draining(context.config.retry_after_seconds)));
    return;
  }
  EngineRequest& request = p.spec.choices[0].request;
  std::string failure = kv.ok() ? Mismatch(*kv, context, request) : kv.status().ToString();
  if (failure.empty()) {
    context.metrics.ObserveKvTransfer(true, kv->num_bytes(), seconds);
    request.import_kv = std::make_shared<const TransferredKv>(std::move(kv).value());
    request.import_required = context.config.disaggregation.failure_policy == DisaggregationFailurePolicy::kFail;
    Launch(p);
    return;
  }
  context.metrics.ObserveKvTransfer(false, 0, seconds);
  if (context.config.disaggregation.failure_policy == DisaggregationFailurePolicy::kFail) {
    LogWarning("request {}: KV transfer failed ({}); answering with an error", p.spec.request_id, failure);
    p.channel->Respond(ErrorResponse(
        InternalError("The KV transfer from the prefill server failed; the request was not served.")));
    return;
  }
  LogWarning("request {}: KV transfer failed ({}); computing the prompt here", p.spec.request_id, failure);
  context.metrics.AddKvRecompute();
  Launch(p);
}

}  // namespace

std::optional<ApiError> ApplyDisaggregation(ServingContext& context, const GenerationOptions& options, JobSpec* spec) {
  if (!options.bootstrap) return std::nullopt;
  const DisaggregationMode mode = context.config.disaggregation.mode;
  if (mode == DisaggregationMode::kNull)
    return InvalidRequest("This server does not run in a disaggregation mode; 'bootstrap_room' is not accepted.",
                          "bootstrap_room");
  if (spec->choices.size() != 1)
    return InvalidRequest("Disaggregated serving takes one prompt and n = 1.", "n");
  EngineRequest& request = spec->choices[0].request;
  if (request.prompt_logprobs >= 0)
    return InvalidRequest("Prompt logprobs are not available with disaggregated serving.", "prompt_logprobs");
  if (mode == DisaggregationMode::kPrefill) {
    disaggregation::KvSender* sender = context.kv_sender;
    if (sender == nullptr) return InternalError("The KV sender is not running.");
    const uint64_t room = options.bootstrap->room;
    request.max_tokens = 1;
    ServerMetrics* metrics = &context.metrics;
    request.export_kv = [sender, room, metrics](Result<TransferredKv> kv) {
      if (kv.ok()) metrics->AddKvPublished();
      sender->Publish(room, std::move(kv));
    };
    return std::nullopt;
  }
  if (context.kv_receiver == nullptr) return InternalError("The KV receiver is not running.");
  spec->bootstrap = options.bootstrap;
  return std::nullopt;
}

void StartGeneration(const std::shared_ptr<ServingContext>& context, const std::shared_ptr<ResponseChannel>& channel,
                     std::unique_ptr<ResponseFormatter> formatter, JobSpec spec, std::shared_ptr<void> ticket) {
  const std::optional<Bootstrap> bootstrap = spec.bootstrap;
  auto pending = std::make_shared<PendingJob>(
      PendingJob{context, channel, std::move(formatter), std::move(spec), std::move(ticket)});
  if (!bootstrap || context->kv_receiver == nullptr) {
    Launch(*pending);
    return;
  }
  const std::shared_ptr<TaskQueue> home = channel->home();
  const auto started = std::chrono::steady_clock::now();
  context->kv_receiver->Pull(bootstrap->host, bootstrap->port, bootstrap->room,
                             [pending, home, started](Result<TransferredKv> kv) {
                               const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
                               auto result = std::make_shared<Result<TransferredKv>>(std::move(kv));
                               home->Post([pending, result, s] { Resume(*pending, std::move(*result), s); });
                             });
}

void PublishRefusal(ServingContext& context, std::string_view body, const ApiError& error) {
  if (context.config.disaggregation.mode != DisaggregationMode::kPrefill || context.kv_sender == nullptr) return;
  // The body was refused unread: parse it with the request path's bounds (UTF-8, nesting,
  // linear members), never nlohmann's recursive parser on a hostile body.
  Json parsed;
  if (ParseJsonBody(body, context.config.limits.max_json_depth, &parsed)) return;
  const auto it = parsed.find("bootstrap_room");
  if (it == parsed.end() || !it->is_number_unsigned()) return;
  context.kv_sender->Publish(it->get<uint64_t>(), Unavailable("the prefill server refused the request: " + error.message));
}

}  // namespace peregrine::server
