// Helpers of the KV transfer tests: a real sender and receiver on loopback.
#pragma once

#include <gtest/gtest.h>

#include <future>
#include <memory>
#include <random>
#include <string>

#include "disaggregation/kv_receiver.h"
#include "disaggregation/kv_sender.h"

namespace peregrine::disaggregation {

inline TransferredKv MakeKv(size_t num_pages, size_t page_bytes, uint32_t seed) {
  std::mt19937 rng(seed);
  TransferredKv kv;
  kv.fingerprint = "test-layout";
  kv.prompt_ids = {11, 12, 13, 14};
  kv.num_tokens = 4;
  kv.first.token = 99;
  kv.first.logprob = -0.5f;
  for (size_t p = 0; p < num_pages; ++p) {
    std::vector<uint8_t>& page = kv.pages.emplace_back(page_bytes + p);
    for (uint8_t& b : page) b = static_cast<uint8_t>(rng());
  }
  return kv;
}

inline std::unique_ptr<KvSender> StartSender(const std::string& secret, double expiry_s = 30.0, std::string fault = {},
                                      uint64_t max_held_bytes = uint64_t{1} << 34) {
  KvSenderConfig c;
  c.max_held_bytes = max_held_bytes;
  c.port = 0;
  c.secret = secret;
  c.expiry_s = expiry_s;
  c.fault = std::move(fault);
  Result<std::unique_ptr<KvSender>> s = KvSender::Start(c);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(*s) : nullptr;
}

inline std::unique_ptr<KvReceiver> StartReceiver(const std::string& secret, double timeout_s = 30.0) {
  KvReceiverConfig c;
  c.secret = secret;
  c.timeout_s = timeout_s;
  Result<std::unique_ptr<KvReceiver>> r = KvReceiver::Start(c);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : nullptr;
}

inline Result<TransferredKv> PullNow(KvReceiver& r, uint16_t port, uint64_t room) {
  std::promise<Result<TransferredKv>> p;
  r.Pull("127.0.0.1", port, room, [&](Result<TransferredKv> kv) { p.set_value(std::move(kv)); });
  return p.get_future().get();
}

}  // namespace peregrine::disaggregation
