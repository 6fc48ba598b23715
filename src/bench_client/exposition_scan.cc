#include "bench_client/exposition_scan.h"

#include <cstdlib>
#include <string>

namespace peregrine::bench_client {

void ForEachSample(std::string_view text, const std::function<void(std::string_view, double)>& sample) {
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line.front() == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t value_at = line.rfind(' ');
    if (name_end == std::string_view::npos || value_at == std::string_view::npos) continue;
    const std::string value(line.substr(value_at + 1));
    char* parsed_end = nullptr;
    const double v = std::strtod(value.c_str(), &parsed_end);
    if (parsed_end == value.c_str()) continue;
    sample(line.substr(0, name_end), v);
  }
}

}  // namespace peregrine::bench_client
