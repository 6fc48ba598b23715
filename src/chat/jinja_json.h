// json.dumps as CPython writes it, for nlohmann::ordered_json values. The DeepSeek-V4 encoder and
// Hugging Face chat templates (`tojson`) put JSON produced by Python's json module into prompts;
// byte-identical prompts need its separators (", " and ": "), escapes and float repr.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace peregrine::chat {

struct PyJsonOptions {
  bool ensure_ascii = false;
  int indent = -1;  // < 0: no newlines (json.dumps indent=None)
  bool sort_keys = false;
  // Empty means json.dumps' default: ", " (or "," when indenting) and ": ".
  std::string item_separator;
  std::string key_separator;
  bool has_separators = false;
};

// Fails only on nesting deeper than 512 levels (a guard against stack exhaustion).
Result<std::string> PyJsonDumps(const nlohmann::ordered_json& value, const PyJsonOptions& options = {});

}  // namespace peregrine::chat
