// Progress of a long startup step (weights coming to the device): a bar redrawn in place when
// stderr is a terminal, otherwise a log line at each quarter, so a service journal shows it too.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace peregrine {

// "name [=========>          ] 12/44, 30.1 GB, 12.3 s" (width: the bar's cells).
std::string FormatProgress(std::string_view name, int64_t done, int64_t total, uint64_t bytes, double seconds,
                           int width = 30);

class Progress {
 public:
  explicit Progress(std::string name);
  Progress(std::string name, bool is_terminal);
  // Parts done of total (done == total ends the bar with a newline). One thread.
  void Update(int64_t done, int64_t total, uint64_t bytes);

 private:
  std::string name_;
  bool is_terminal_;
  int64_t last_quarter_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace peregrine
