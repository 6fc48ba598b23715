#include "router/pd_request.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace peregrine::router {
namespace {

TEST(PdRequestTest, BothCopiesNameTheRoomAndOnlyTheDecodeCopyStreams) {
  const std::string body =
      R"({"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true},"max_tokens":5})";
  std::optional<nlohmann::json> parsed = ParsePdBody(body);
  ASSERT_TRUE(parsed.has_value());
  const std::optional<PdBodies> split = SplitForPd(std::move(*parsed), "10.0.0.7", 8998, 123456789012345ULL);
  const auto decode = nlohmann::json::parse(split->decode);
  const auto prefill = nlohmann::json::parse(split->prefill);
  for (const auto* j : {&decode, &prefill}) {
    EXPECT_EQ((*j)["bootstrap_host"], "10.0.0.7");
    EXPECT_EQ((*j)["bootstrap_port"], 8998);
    EXPECT_EQ((*j)["bootstrap_room"].get<uint64_t>(), 123456789012345ULL);
    EXPECT_EQ((*j)["prompt"], "hi");
    EXPECT_EQ((*j)["max_tokens"], 5);
  }
  EXPECT_EQ(decode["stream"], true);
  EXPECT_TRUE(decode.contains("stream_options"));
  EXPECT_EQ(prefill["stream"], false);
  EXPECT_FALSE(prefill.contains("stream_options"));
}

TEST(PdRequestTest, NonObjectsAndBodiesWithARoomAreNotSplit) {
  for (const char* body : {"", "[1,2]", "{\"prompt\":", "\"text\"", R"({"prompt":"x","bootstrap_room":1})"}) {
    EXPECT_FALSE(ParsePdBody(body).has_value()) << body;
  }
  EXPECT_TRUE(IsPdRoute("/v1/chat/completions"));
  EXPECT_TRUE(IsPdRoute("/v1/completions"));
  EXPECT_FALSE(IsPdRoute("/v1/models"));
  EXPECT_FALSE(IsPdRoute("/tokenize"));
}

}  // namespace
}  // namespace peregrine::router
