// The Jinja sandbox: template injection payloads, runaway loops, deep recursion and huge outputs
// end in a Status, quickly, instead of reaching anything outside the template's data.
#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "chat/jinja_template.h"

namespace peregrine::chat {
namespace {

using Json = nlohmann::ordered_json;

Status RenderStatus(const std::string& source, const JinjaLimits& limits = {}, const Json& context = Json::object()) {
  auto tmpl = JinjaTemplate::Parse(source);
  if (!tmpl.ok()) return tmpl.status();
  auto out = tmpl->Render(context, limits);
  return out.ok() ? Status::Ok() : out.status();
}

TEST(JinjaSandboxTest, InjectionPayloadsFailCleanly) {
  const char* payloads[] = {
      "{{ ''.__class__ }}",
      "{{ ''.__class__.__mro__[1].__subclasses__() }}",
      "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
      "{{ joiner.__init__.__globals__ }}",
      "{{ lipsum.__globals__['os'] }}",
      "{{ namespace.__init__ }}",
      "{{ self.__dict__ }}",
      "{{ config.items() }}",
      "{{ request.application.__globals__ }}",
      "{{ messages.__class__ }}",
      "{{ ''['__class__'] }}",
      "{{ range.__self__ }}",
      "{% set ns = namespace() %}{% set ns.__dict__ = 1 %}",
      "{{ [].append(1) }}",
      "{{ {}.update({'a': 1}) }}",
      "{% include '/etc/passwd' %}",
      "{% import 'os' as os %}",
      "{% extends 'base' %}",
      "{{ ''|attr('__class__') }}",
  };
  for (const char* payload : payloads) {
    SCOPED_TRACE(payload);
    Status s = RenderStatus(payload, {}, Json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"));
    EXPECT_FALSE(s.ok());
  }
}

TEST(JinjaSandboxTest, NestedRangeLoopsTripTheStepBudgetQuickly) {
  auto start = std::chrono::steady_clock::now();
  Status s = RenderStatus("{% for a in range(999) %}{% for b in range(999) %}{% for c in range(999) %}x"
                          "{% endfor %}{% endfor %}{% endfor %}");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "template exceeded its step budget");
  EXPECT_LT(ms, 500.0) << "budget tripped after " << ms << " ms";  // ~100 ms target; slack for loaded CI
  std::printf("nested range(999) loops stopped after %.1f ms\n", ms);
}

TEST(JinjaSandboxTest, HugeRangeIsRefused) {
  EXPECT_EQ(RenderStatus("{{ range(1000000000)|length }}").code(), StatusCode::kResourceExhausted);
}

TEST(JinjaSandboxTest, RecursionIsBounded) {
  Status s = RenderStatus("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(), "template macro calls nest too deeply");
}

TEST(JinjaSandboxTest, DeepNestingIsASyntaxError) {
  EXPECT_FALSE(RenderStatus("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}").ok());
  EXPECT_FALSE(RenderStatus("{{ " + std::string(5000, '-') + "1 }}").ok());
  std::string chain = "{{ x";
  for (int i = 0; i < 5000; ++i) chain += "[0]";
  EXPECT_FALSE(RenderStatus(chain + " }}").ok());
  std::string ifs;
  for (int i = 0; i < 2000; ++i) ifs += "{% if true %}";
  EXPECT_FALSE(RenderStatus(ifs).ok());
}

TEST(JinjaSandboxTest, OutputIsCapped) {
  JinjaLimits limits;
  limits.max_output_bytes = 1 << 20;
  EXPECT_EQ(RenderStatus("{{ 'x' * 100000000 }}", limits).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(RenderStatus("{% for i in range(100000) %}{{ 'abcdefghijklmnopqrstuvwxyz' }}{% endfor %}", limits).code(),
            StatusCode::kResourceExhausted);
  EXPECT_EQ(RenderStatus("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                         "{% endfor %}",
                         limits)
                .code(),
            StatusCode::kResourceExhausted);
}

TEST(JinjaSandboxTest, NamespacesCannotFormCycles) {
  EXPECT_FALSE(RenderStatus("{% set ns = namespace() %}{% set ns.me = [ns] %}").ok());
  EXPECT_FALSE(RenderStatus("{% set a = namespace() %}{% set b = namespace(x=a) %}").ok());
}

TEST(JinjaSandboxTest, IntegerOverflowIsAnError) {
  EXPECT_FALSE(RenderStatus("{{ 9223372036854775807 + 1 }}").ok());
  EXPECT_FALSE(RenderStatus("{{ 2 ** 64 }}").ok());
  EXPECT_FALSE(RenderStatus("{{ 99999999999999999999 }}").ok());
}

TEST(JinjaSandboxTest, RaiseExceptionMessageIsSanitized) {
  Status s = RenderStatus("{{ raise_exception('bad \x01 role') }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "chat template raised an exception: bad ? role");
}

TEST(JinjaSandboxTest, RendersWithinDefaultLimitsForLongConversations) {
  Json messages = Json::array();
  for (int i = 0; i < 2000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "message " + std::to_string(i)}});
  auto tmpl = JinjaTemplate::Parse(
      "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] | trim }}{{ '\\n' if not loop.last }}"
      "{% endfor %}");
  ASSERT_TRUE(tmpl.ok());
  auto out = RenderChatTemplate(*tmpl, messages, Json(), true, Json::object());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->substr(0, 16), "<user>message 0\n");
}

}  // namespace
}  // namespace peregrine::chat
