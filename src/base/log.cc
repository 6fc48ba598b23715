#include "base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <memory>
#include <string>

namespace peregrine {

namespace {

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarning: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
  }
  return spdlog::level::info;
}

// The process's one logger, made on first use (spdlog's registry is process-wide already;
// this keeps its construction thread-safe and its format fixed).
spdlog::logger& Logger() {
  static const std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_mt("peregrine");
    l->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-7l%$ %v");
    l->set_level(spdlog::level::info);
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *logger;
}

}  // namespace

Result<LogLevel> ParseLogLevel(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (n == "debug") return LogLevel::kDebug;
  if (n == "info") return LogLevel::kInfo;
  if (n == "warning" || n == "warn") return LogLevel::kWarning;
  if (n == "error") return LogLevel::kError;
  return InvalidArgument("unknown log level (debug, info, warning or error)");
}

void SetLogLevel(LogLevel level) { Logger().set_level(ToSpdlog(level)); }

bool LogEnabled(LogLevel level) { return Logger().should_log(ToSpdlog(level)); }

void LogLine(LogLevel level, std::string_view message) { Logger().log(ToSpdlog(level), message); }

void LogLines(LogLevel level, std::string_view text) {
  if (!LogEnabled(level)) return;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (!line.empty()) LogLine(level, line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
}

}  // namespace peregrine
