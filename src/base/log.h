// Process logging: timestamped, levelled lines on stderr (spdlog), the level set once at
// startup from --log-level. Call sites format with fmt; a line below the level costs one
// comparison.
#pragma once

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "base/status.h"

namespace peregrine {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// debug, info, warning (or warn), error; any case.
Result<LogLevel> ParseLogLevel(std::string_view name);
// Before any other thread logs (the CLI, at startup).
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);
void LogLine(LogLevel level, std::string_view message);
// One log line per line of `text`.
void LogLines(LogLevel level, std::string_view text);

template <typename... Args>
void Log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (LogEnabled(level)) LogLine(level, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void LogInfo(fmt::format_string<Args...> format, Args&&... args) {
  Log(LogLevel::kInfo, format, std::forward<Args>(args)...);
}
template <typename... Args>
void LogWarning(fmt::format_string<Args...> format, Args&&... args) {
  Log(LogLevel::kWarning, format, std::forward<Args>(args)...);
}
template <typename... Args>
void LogError(fmt::format_string<Args...> format, Args&&... args) {
  Log(LogLevel::kError, format, std::forward<Args>(args)...);
}
template <typename... Args>
void LogDebug(fmt::format_string<Args...> format, Args&&... args) {
  Log(LogLevel::kDebug, format, std::forward<Args>(args)...);
}

}  // namespace peregrine
