#include "cli/router_command.h"

#include <csignal>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "router/router_server.h"

namespace peregrine::cli {

namespace {

struct RouterFlags {
  router::RouterConfig config;
  std::string policy = "cache_aware";
  double cache_threshold = 0.5;
  int64_t balance_abs_threshold = 32;
  double balance_rel_threshold = 1.5;
  // SGLang's PD flags: --pd-disaggregation --prefill URL [BOOTSTRAP_PORT] ... --decode URL ...
  bool pd_disaggregation = false;
  std::vector<std::vector<std::string>> prefill;
  std::vector<std::string> decode;
};

// The PD flags into the config; a message when they do not fit together.
std::string ApplyPdFlags(RouterFlags& flags) {
  if (!flags.pd_disaggregation) {
    if (!flags.prefill.empty() || !flags.decode.empty()) return "--prefill and --decode need --pd-disaggregation";
    if (flags.config.worker_urls.empty()) return "the router needs --worker-urls";
    return {};
  }
  if (flags.prefill.empty() || flags.decode.empty()) return "--pd-disaggregation needs --prefill and --decode workers";
  if (!flags.config.worker_urls.empty()) return "--pd-disaggregation takes --prefill and --decode, not --worker-urls";
  flags.config.worker_urls = flags.decode;
  for (const std::vector<std::string>& p : flags.prefill) {
    router::RouterConfig::PrefillWorker w;
    w.url = p.at(0);
    if (p.size() > 1) {
      int port = 0;
      try {
        port = std::stoi(p[1]);
      } catch (const std::exception&) {
        port = 0;
      }
      if (port < 1 || port > 65535) return "bad bootstrap port '" + p[1] + "' for prefill worker " + w.url;
      w.bootstrap_port = static_cast<uint16_t>(port);
    }
    flags.config.prefill_workers.push_back(w);
  }
  return {};
}

int RunRouter(RouterFlags& flags) {
  Result<router::RoutingPolicy> policy = router::ParseRoutingPolicy(flags.policy);
  if (!policy.ok()) {
    LogError("{}", policy.status().message());
    return 2;
  }
  if (const std::string bad = ApplyPdFlags(flags); !bad.empty()) {
    LogError("{}", bad);
    return 2;
  }
  if (auto* c = std::get_if<router::CacheAware>(&*policy)) {
    c->cache_threshold = flags.cache_threshold;
    c->balance_abs_threshold = flags.balance_abs_threshold;
    c->balance_rel_threshold = flags.balance_rel_threshold;
  }
  flags.config.policy = *policy;
  // Block the signals before the router's threads start, so they stay with this thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  Result<std::unique_ptr<router::RouterServer>> server = router::RouterServer::Start(flags.config);
  if (!server.ok()) {
    LogError("{}", server.status().ToString());
    return 1;
  }
  if (flags.pd_disaggregation) {
    LogInfo("routing on http://{}:{} over {} prefill and {} decode worker(s), policy {}", flags.config.host,
            (*server)->port(), flags.config.prefill_workers.size(), flags.config.worker_urls.size(),
            router::PolicyName(flags.config.policy));
  } else {
    LogInfo("routing on http://{}:{} over {} worker(s), policy {}", flags.config.host, (*server)->port(),
            flags.config.worker_urls.size(), router::PolicyName(flags.config.policy));
  }
  int received = 0;
  sigwait(&signals, &received);
  LogInfo("stopping (signal {})", received);
  (*server)->Stop();
  return 0;
}

}  // namespace

void AddRouterCommand(CLI::App& app) {
  auto flags = std::make_shared<RouterFlags>();
  router::RouterConfig& c = flags->config;
  CLI::App* cmd = app.add_subcommand("router", "OpenAI-compatible router over Peregrine (or any OpenAI) workers");
  cmd->add_option("--host", c.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", c.port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--worker-urls", c.worker_urls, "Workers, http://host:port[/prefix] each");
  cmd->add_flag("--pd-disaggregation", flags->pd_disaggregation,
                "Prefill/decode pairs: each request goes to a --prefill worker (its prompt) and a --decode worker "
                "(its tokens, pulled KV and all)");
  cmd->add_option("--prefill", flags->prefill,
                  "A prefill worker: URL [BOOTSTRAP_PORT] (its --disaggregation-bootstrap-port, default 8998); repeat")
      ->expected(1, 2)
      ->allow_extra_args(false);
  cmd->add_option("--decode", flags->decode, "A decode worker URL; repeat");
  cmd->add_option("--policy", flags->policy, "round_robin, least_load (shortest_queue) or cache_aware")
      ->capture_default_str();
  cmd->add_option("--cache-threshold", flags->cache_threshold,
                  "cache_aware: matched prompt fraction that keeps a request on its worker")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option("--balance-abs-threshold", flags->balance_abs_threshold,
                  "cache_aware: load gap beyond which requests go to the least loaded worker")
      ->capture_default_str();
  cmd->add_option("--balance-rel-threshold", flags->balance_rel_threshold,
                  "cache_aware: load ratio beyond which requests go to the least loaded worker")
      ->capture_default_str();
  cmd->add_option("--api-key", c.api_key, "Clients must send 'Authorization: Bearer KEY'");
  cmd->add_option("--worker-api-key", c.worker_api_key,
                  "Sent to the workers (default: the client's Authorization is passed on)");
  cmd->add_option("--max-retries,--retry-max-retries", c.max_retries,
                  "Other workers tried for a request that failed before its first byte")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  cmd->add_option("--health-check-interval-secs", c.health_interval_s, "Seconds between health checks")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  cmd->add_option("--health-failure-threshold", c.unhealthy_after,
                  "Consecutive failed checks or requests that eject a worker")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--request-timeout-secs", c.request_timeout_s, "Deadline of one upstream exchange")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--threads", c.num_threads, "I/O threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("--metrics-prefix", c.metrics_prefix, "Prefix of the router's own metrics")->capture_default_str();
  cmd->callback([flags] {
    const int rc = RunRouter(*flags);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace peregrine::cli
