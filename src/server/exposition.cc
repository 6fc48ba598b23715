#include "server/exposition.h"

#include <charconv>
#include <cmath>

namespace peregrine::server {
namespace {

void AppendNumber(double v, std::string& out) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, ec == std::errc() ? end : buf);
}

}  // namespace

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Label(std::string_view key, std::string_view value) {
  std::string out(key);
  out.append("=\"").append(EscapeLabelValue(value)).append("\"");
  return out;
}

ExpositionWriter::ExpositionWriter(std::string_view prefix, std::string common_labels)
    : prefix_(prefix), common_labels_(std::move(common_labels)) {
  out_.reserve(16384);
}

void ExpositionWriter::AppendName(std::string_view name) {
  out_.append(prefix_).append(":").append(name);
}

void ExpositionWriter::AppendLabels(std::string_view labels) {
  out_ += '{';
  out_.append(common_labels_);
  if (!common_labels_.empty() && !labels.empty()) out_ += ',';
  out_.append(labels);
  out_ += '}';
}

void ExpositionWriter::Family(std::string_view name, std::string_view help, std::string_view type) {
  out_.append("# HELP ");
  AppendName(name);
  out_.append(" ").append(help).append("\n# TYPE ");
  AppendName(name);
  out_.append(" ").append(type).append("\n");
}

void ExpositionWriter::Sample(std::string_view name, std::string_view labels, double value) {
  AppendName(name);
  AppendLabels(labels);
  out_ += ' ';
  AppendNumber(value, out_);
  out_ += '\n';
}

void ExpositionWriter::Gauge(std::string_view name, std::string_view help, double value) {
  Family(name, help, "gauge");
  Sample(name, {}, value);
}

void ExpositionWriter::Counter(std::string_view name, std::string_view help, double value) {
  Family(name, help, "counter");
  Sample(name, {}, value);
}

void ExpositionWriter::HistogramSeries(std::string_view name, std::string_view help,
                                       std::span<const double> upper_bounds, std::span<const uint64_t> counts,
                                       double sum) {
  Family(name, help, "histogram");
  const std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  std::string le;
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    le = "le=\"";
    if (i < upper_bounds.size()) {
      AppendNumber(upper_bounds[i], le);
    } else {
      le += "+Inf";
    }
    le += '"';
    Sample(bucket, le, static_cast<double>(cumulative));
  }
  Sample(std::string(name) + "_sum", {}, sum);
  Sample(std::string(name) + "_count", {}, static_cast<double>(cumulative));
}

}  // namespace peregrine::server
