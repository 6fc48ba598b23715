// The KV transfer (src/disaggregation) on one host: a room of `pages` pages of `page_bytes`
// published by a KvSender and pulled by a KvReceiver in this process, over each UCX
// transport set given (UCX_TLS values; "default" lets UCX choose). Prints GB/s of pulled KV
// against two peers run in the same process: a memcpy of the same bytes (the host's copy
// roofline for one pass) and the SHA-256 of them (the digest each side computes).
//   kv_transfer_bench [--pages N] [--page-bytes B] [--reps R] [--tls default,tcp,...] [--json FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <string>
#include <vector>

#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"
#include "disaggregation/transfer_wire.h"

namespace {

using Clock = std::chrono::steady_clock;
using peregrine::Result;
using peregrine::TransferredKv;
namespace dg = peregrine::disaggregation;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t pages = 65;
  int64_t page_bytes = 1 << 20;
  int reps = 8;
  std::string tls = "default,tcp";
  std::string json;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--pages") pages = std::atoll(argv[i + 1]);
    else if (k == "--page-bytes") page_bytes = std::atoll(argv[i + 1]);
    else if (k == "--reps") reps = std::atoi(argv[i + 1]);
    else if (k == "--tls") tls = argv[i + 1];
    else if (k == "--json") json = argv[i + 1];
  }
  TransferredKv kv;
  kv.fingerprint = "bench";
  kv.prompt_ids.assign(1000, 7);
  kv.num_tokens = 1000;
  for (int64_t p = 0; p < pages; ++p) {
    std::vector<uint8_t>& page = kv.pages.emplace_back(static_cast<size_t>(page_bytes));
    for (size_t i = 0; i < page.size(); ++i) page[i] = static_cast<uint8_t>(i * 131 + static_cast<size_t>(p));
  }
  const double bytes = static_cast<double>(pages) * static_cast<double>(page_bytes);
  // Peers: one memcpy pass and one SHA-256 pass over the same pages.
  std::vector<uint8_t> sink(static_cast<size_t>(page_bytes));
  auto t = Clock::now();
  for (int r = 0; r < reps; ++r)
    for (const auto& page : kv.pages) std::memcpy(sink.data(), page.data(), page.size());
  const double memcpy_gbs = bytes * reps / Seconds(t) / 1e9;
  t = Clock::now();
  uint8_t acc = 0;
  for (const auto& page : kv.pages) acc ^= dg::Sha256(page)[0];
  const double sha_gbs = bytes / Seconds(t) / 1e9;
  std::string lines;
  for (const std::string& set : Split(tls)) {
    if (set == "default") {
      unsetenv("UCX_TLS");
    } else {
      setenv("UCX_TLS", set.c_str(), 1);
    }
    dg::KvSenderConfig sc;
    sc.port = 0;
    sc.secret = "bench-secret-0123456789";
    auto sender = dg::KvSender::Start(sc);
    dg::KvReceiverConfig rc;
    rc.secret = sc.secret;
    auto receiver = dg::KvReceiver::Start(rc);
    if (!sender.ok() || !receiver.ok()) {
      std::fprintf(stderr, "%s: %s %s\n", set.c_str(), sender.status().ToString().c_str(),
                   receiver.status().ToString().c_str());
      continue;
    }
    double best = 1e30, total = 0;
    for (int r = 0; r < reps + 1; ++r) {
      std::promise<Result<TransferredKv>> done;
      TransferredKv copy = kv;
      const auto start = Clock::now();
      (*sender)->Publish(static_cast<uint64_t>(r + 1), std::move(copy));
      (*receiver)->Pull("127.0.0.1", (*sender)->port(), static_cast<uint64_t>(r + 1),
                        [&done](Result<TransferredKv> k) { done.set_value(std::move(k)); });
      Result<TransferredKv> got = done.get_future().get();
      const double s = Seconds(start);
      if (!got.ok() || got->pages.size() != kv.pages.size()) {
        std::fprintf(stderr, "%s: pull failed: %s\n", set.c_str(), got.status().ToString().c_str());
        return 1;
      }
      if (r == 0) continue;  // the first pull connects
      best = std::min(best, s);
      total += s;
    }
    const double gbs = bytes / best / 1e9;
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"bench\":\"kv_transfer\",\"tls\":\"%s\",\"pages\":%lld,\"page_bytes\":%lld,\"best_s\":%.6f,"
                  "\"mean_s\":%.6f,\"gb_per_s\":%.3f,\"memcpy_gb_per_s\":%.3f,\"sha256_gb_per_s\":%.3f,"
                  "\"vs_memcpy\":%.3f}\n",
                  set.c_str(), static_cast<long long>(pages), static_cast<long long>(page_bytes), best, total / reps,
                  gbs, memcpy_gbs, sha_gbs, gbs / memcpy_gbs);
    std::fputs(line, stdout);
    lines += line;
  }
  std::fprintf(stderr, "(%u)\n", acc);
  if (!json.empty()) std::ofstream(json, std::ios::app) << lines;
  return 0;
}
