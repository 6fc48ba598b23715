// The server test fixture: the real DeepSeek-V4 tokenizer (loaded once per binary), a
// FakeEngine, and a Server on an ephemeral port.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fake_engine.h"
#include "http_test_client.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace peregrine::server::testing {

inline constexpr int64_t kVocabSize = 129280;
inline constexpr int64_t kMaxContext = 4096;
inline constexpr const char* kModel = "deepseek-v4-test";

using Json = nlohmann::ordered_json;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  void SetUp() override;
  void TearDown() override;

  // A config with test-friendly limits and timeouts.
  static ServerConfig TestConfig();
  // (Re)starts the server with `config` (the engine stays).
  void Restart(const ServerConfig& config);

  static const tokenizer::Tokenizer& tok() { return *tokenizer_; }
  std::vector<int32_t> Encode(const std::string& text) const;
  // Scripts every request to emit `text`'s tokens, then EOS.
  void ScriptText(const std::string& text, bool with_eos = true);

  ClientResponse Chat(const Json& body, const Headers& headers = {});
  ClientResponse Completion(const Json& body, const Headers& headers = {});
  static Json Body(const ClientResponse& r);  // parsed JSON body (null when not JSON)
  // Joins the streamed chat deltas of choice `index` of an SSE body.
  static std::string StreamedField(const std::string& sse, const char* field, size_t index = 0);
  // 400 with the OpenAI envelope.
  static void ExpectInvalid(const ClientResponse& r, const std::string& context);
  void ExpectAlive();

  static std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<Server> server_;
  uint16_t port_ = 0;
};

}  // namespace peregrine::server::testing
