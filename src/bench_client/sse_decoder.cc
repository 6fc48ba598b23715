#include "bench_client/sse_decoder.h"

namespace peregrine::bench_client {

void SseDecoder::Feed(std::string_view bytes, std::vector<std::string>& events) {
  while (!bytes.empty()) {
    const size_t newline = bytes.find('\n');
    if (newline == std::string_view::npos) {
      line_.append(bytes);
      return;
    }
    std::string_view line = bytes.substr(0, newline);
    bytes.remove_prefix(newline + 1);
    if (line_.empty()) {
      ProcessLine(line, events);  // the common case: the whole line sits in this read
    } else {
      line_.append(line);
      ProcessLine(line_, events);
      line_.clear();
    }
  }
}

void SseDecoder::Finish(std::vector<std::string>& events) {
  if (!line_.empty()) {
    ProcessLine(line_, events);
    line_.clear();
  }
  ProcessLine("", events);
}

void SseDecoder::ProcessLine(std::string_view line, std::vector<std::string>& events) {
  if (line.ends_with('\r')) line.remove_suffix(1);
  if (line.empty()) {
    if (has_data_) events.push_back(std::move(data_));
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;
  const size_t colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") return;
  std::string_view value = colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (value.starts_with(' ')) value.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(value);
  has_data_ = true;
}

}  // namespace peregrine::bench_client
