// Parses a Prometheus text exposition for the server tests: every sample line must be
// `name{labels} value`; HELP and TYPE lines are skipped.
#pragma once

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>

namespace peregrine::server::testing {

// Samples by `name{labels}`; empty, with the offending line in *error, on a malformed line.
inline std::map<std::string, double> ParseExposition(const std::string& text, std::string* error) {
  std::map<std::string, double> samples;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty()) continue;
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos || line.find('{') == std::string::npos || line[space - 1] != '}') {
      *error = line;
      return {};
    }
    const std::string value = line.substr(space + 1);
    char* end = nullptr;
    const double v = value == "+Inf" ? 1e308 : std::strtod(value.c_str(), &end);
    if (value != "+Inf" && (end == nullptr || *end != '\0')) {
      *error = line;
      return {};
    }
    samples[line.substr(0, space)] = v;
  }
  return samples;
}

}  // namespace peregrine::server::testing
