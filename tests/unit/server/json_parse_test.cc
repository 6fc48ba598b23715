// ParseJsonLinear: nlohmann's results (order, duplicates, numbers, errors) in linear time.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "server/json_parse.h"

namespace peregrine::server {
namespace {

TEST(JsonParseTest, SameValuesAsNlohmann) {
  for (const char* text :
       {R"({"b":1,"a":[1,2.5,-3,18446744073709551615,"x",null,true,false,{}],"c":{"z":{"y":[]}}})",
        R"([])", R"("s")", R"(0)", R"({"k":1,"k":2,"j":3})", R"({"\u00e9":"\ud83d\ude42"})",
        R"([[[[{"a":[{"b":null}]}]]]])"}) {
    const std::optional<Json> ours = ParseJsonLinear(text);
    ASSERT_TRUE(ours.has_value()) << text;
    EXPECT_EQ(ours->dump(), Json::parse(text).dump()) << text;
  }
}

TEST(JsonParseTest, DuplicatesKeepFirstPositionAndLastValue) {
  std::string text = "{";
  for (int i = 0; i < 40; ++i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  text += R"("k3":"again","k39":"last"})";
  const std::optional<Json> ours = ParseJsonLinear(text);
  ASSERT_TRUE(ours.has_value());
  EXPECT_EQ(ours->size(), 40u);
  EXPECT_EQ((*ours)["k3"], "again");
  EXPECT_EQ(ours->begin().key(), "k0");
  EXPECT_EQ(ours->dump(), Json::parse(text).dump());
}

TEST(JsonParseTest, InvalidTextIsRefused) {
  for (const char* text : {"", "{", "[1,]", R"({"a":1,})", "nul", "1 2", R"({"a" 1})", "NaN",
                           R"({"a":[}])", "[1]x"}) {
    EXPECT_FALSE(ParseJsonLinear(text).has_value()) << text;
  }
}

// 150,000 keys in one object: nlohmann's ordered_json DOM parse takes 18-48 s here.
TEST(JsonParseTest, ManyKeysParseInLinearTime) {
  std::string text = "{";
  for (int i = 0; i < 150000; ++i) {
    text += (i ? ",\"key" : "\"key") + std::to_string(i) + "\":" + std::to_string(i);
  }
  text += "}";
  const auto t0 = std::chrono::steady_clock::now();
  const std::optional<Json> parsed = ParseJsonLinear(text);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->size(), 150000u);
  EXPECT_EQ((*parsed)["key149999"], 149999);
  EXPECT_LT(seconds, 1.0);  // ~0.1 s; generous for a loaded 2-core machine
}

}  // namespace
}  // namespace peregrine::server
