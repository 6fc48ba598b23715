#include "demo_model_golden.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "golden.h"

namespace peregrine::testing {

std::filesystem::path DemoModelDir() { return SourceRoot() / "models" / "deepseek-v4-demo"; }

Result<DemoGolden> ReadDemoGolden() {
  const std::filesystem::path file = SourceRoot() / "tests" / "model" / "demo_model_golden.json";
  std::ifstream in(file);
  if (!in) return NotFound("cannot read " + file.string());
  const nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(file.string() + " is not JSON");
  DemoGolden g;
  g.prompt_ids = doc.at("prompt_ids").get<std::vector<int32_t>>();
  for (const auto& s : doc.at("greedy")) {
    g.greedy.push_back({s.at("token").get<int32_t>(), s.at("top_ids").get<std::vector<int32_t>>(),
                        s.at("top_logits").get<std::vector<double>>(), s.at("lse").get<double>()});
  }
  const auto& t = doc.at("teacher");
  g.rows = t.at("rows").get<std::vector<std::vector<int32_t>>>();
  g.argmax = t.at("argmax").get<std::vector<std::vector<int32_t>>>();
  g.target_logprob = t.at("target_logprob").get<std::vector<std::vector<double>>>();
  const auto& m = doc.at("mtp");
  g.mtp_tokens = m.at("tokens").get<std::vector<int32_t>>();
  g.mtp_argmax = m.at("argmax").get<std::vector<int32_t>>();
  g.mtp_top_ids = m.at("top_ids").get<std::vector<std::vector<int32_t>>>();
  g.mtp_top_logits = m.at("top_logits").get<std::vector<std::vector<double>>>();
  g.mtp_lse = m.at("lse").get<std::vector<double>>();
  return g;
}

}  // namespace peregrine::testing
