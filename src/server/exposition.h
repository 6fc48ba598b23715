// ExpositionWriter: builds the Prometheus text exposition (format 0.0.4). Every series is
// named `prefix:name` and carries the common labels first, then its own.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace peregrine::server {

class ExpositionWriter {
 public:
  // `common_labels` is already escaped: `model_name="x"` (or empty).
  ExpositionWriter(std::string_view prefix, std::string common_labels);

  // A family of one type, then its samples (`labels` escaped, appended to the common ones).
  void Family(std::string_view name, std::string_view help, std::string_view type);
  void Sample(std::string_view name, std::string_view labels, double value);

  // One-sample families.
  void Gauge(std::string_view name, std::string_view help, double value);
  void Counter(std::string_view name, std::string_view help, double value);
  // `counts` per bucket (not cumulative), one more than `upper_bounds`.
  void HistogramSeries(std::string_view name, std::string_view help, std::span<const double> upper_bounds,
                       std::span<const uint64_t> counts, double sum);

  std::string Take() { return std::move(out_); }

 private:
  void AppendName(std::string_view name);
  void AppendLabels(std::string_view labels);

  std::string prefix_;
  std::string common_labels_;
  std::string out_;
};

// A label value escaped for the exposition (backslash, double quote, newline).
std::string EscapeLabelValue(std::string_view value);
// `key="value"` with the value escaped.
std::string Label(std::string_view key, std::string_view value);

}  // namespace peregrine::server
