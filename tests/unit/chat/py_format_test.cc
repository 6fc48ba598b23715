// Python-compatible formatting helpers (float repr, json.dumps) used by both prompt renderers.
#include <gtest/gtest.h>

#include "chat/jinja_json.h"
#include "chat/jinja_pystr.h"

namespace peregrine::chat {
namespace {

TEST(PyFormatTest, FloatReprMatchesCPython) {
  EXPECT_EQ(PyFloatRepr(1.0), "1.0");
  EXPECT_EQ(PyFloatRepr(-0.0), "-0.0");
  EXPECT_EQ(PyFloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PyFloatRepr(1e16), "1e+16");
  EXPECT_EQ(PyFloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(PyFloatRepr(1e-5), "1e-05");
  EXPECT_EQ(PyFloatRepr(0.0001), "0.0001");
  EXPECT_EQ(PyFloatRepr(1.5e-7), "1.5e-07");
  EXPECT_EQ(PyFloatRepr(1e100), "1e+100");
  EXPECT_EQ(PyFloatRepr(123.456), "123.456");
  EXPECT_EQ(PyFloatRepr(2.5), "2.5");
}

TEST(PyFormatTest, StrReprPicksQuotes) {
  EXPECT_EQ(PyStrRepr("abc"), "'abc'");
  EXPECT_EQ(PyStrRepr("it's"), "\"it's\"");
  EXPECT_EQ(PyStrRepr("a'b\"c"), "'a\\'b\"c'");
  EXPECT_EQ(PyStrRepr("line\nnext\\"), "'line\\nnext\\\\'");
}

TEST(PyFormatTest, JsonDumpsMatchesCPythonDefaults) {
  auto v = nlohmann::ordered_json::parse(R"({"b": [1, 2.5, true, null], "a": "é\n\u0001", "c": {}})");
  EXPECT_EQ(*PyJsonDumps(v), "{\"b\": [1, 2.5, true, null], \"a\": \"é\\n\\u0001\", \"c\": {}}");
  PyJsonOptions ascii;
  ascii.ensure_ascii = true;
  ascii.sort_keys = true;
  EXPECT_EQ(*PyJsonDumps(v, ascii), "{\"a\": \"\\u00e9\\n\\u0001\", \"b\": [1, 2.5, true, null], \"c\": {}}");
  PyJsonOptions indented;
  indented.indent = 2;
  EXPECT_EQ(*PyJsonDumps(nlohmann::ordered_json::parse(R"({"k": [1, {}]})"), indented),
            "{\n  \"k\": [\n    1,\n    {}\n  ]\n}");
  EXPECT_EQ(*PyJsonDumps(nlohmann::ordered_json("😀"), ascii), "\"\\ud83d\\ude00\"");
}

TEST(PyFormatTest, StripAndCodePoints) {
  EXPECT_EQ(PyStrip("\u3000 x y \n", nullptr, true, true), "x y");
  std::string chars = "xy";
  EXPECT_EQ(PyStrip("xxaxyy", &chars, true, false), "axyy");
  EXPECT_EQ(CountCodePoints("héllo😀"), 6u);
}

}  // namespace
}  // namespace peregrine::chat
