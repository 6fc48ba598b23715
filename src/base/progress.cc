#include "base/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include <fmt/format.h>

#include "base/log.h"

namespace peregrine {

std::string FormatProgress(std::string_view name, int64_t done, int64_t total, uint64_t bytes, double seconds,
                           int width) {
  const int64_t t = std::max<int64_t>(total, 1);
  const int64_t d = std::clamp<int64_t>(done, 0, t);
  const int filled = static_cast<int>(d * width / t);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < width) {
    bar += '>';
    bar.append(static_cast<size_t>(width - filled - 1), ' ');
  }
  return fmt::format("{} [{}] {}/{}, {:.1f} GB, {:.1f} s", name, bar, d, t, static_cast<double>(bytes) / 1e9,
                     seconds);
}

Progress::Progress(std::string name) : Progress(std::move(name), isatty(STDERR_FILENO) == 1) {}

Progress::Progress(std::string name, bool is_terminal)
    : name_(std::move(name)), is_terminal_(is_terminal), start_(std::chrono::steady_clock::now()) {}

void Progress::Update(int64_t done, int64_t total, uint64_t bytes) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string line = FormatProgress(name_, done, total, bytes, seconds);
  if (is_terminal_) {
    std::fprintf(stderr, "\r%s%s", line.c_str(), done >= total ? "\n" : "");
    std::fflush(stderr);
    return;
  }
  const int64_t quarter = total > 0 ? done * 4 / total : 4;
  if (quarter > last_quarter_) {
    last_quarter_ = quarter;
    LogInfo("{}", line);
  }
}

}  // namespace peregrine
