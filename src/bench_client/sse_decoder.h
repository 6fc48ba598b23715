// Incremental decoder for text/event-stream bodies: bytes in, each complete event's data out.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace peregrine::bench_client {

// Follows the event-stream framing: lines end in "\n" or "\r\n", "data:" lines of one event are
// joined with "\n", a blank line ends the event, comment lines (":") and other fields are
// skipped. Not thread-safe; one decoder per response.
class SseDecoder {
 public:
  // Consumes `bytes`, split anywhere (even inside a line), and appends the data of every event
  // they complete to `events`.
  void Feed(std::string_view bytes, std::vector<std::string>& events);

  // At the end of the body: appends an event whose blank-line terminator never came.
  void Finish(std::vector<std::string>& events);

 private:
  void ProcessLine(std::string_view line, std::vector<std::string>& events);

  std::string line_;  // the current line, not yet terminated
  std::string data_;  // the current event's data lines, joined by '\n'
  bool has_data_ = false;
};

}  // namespace peregrine::bench_client
