#include "model/safetensors.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace peregrine {
namespace {

// Element counts beyond this cannot be a real tensor and would overflow byte arithmetic.
constexpr uint64_t kMaxElements = uint64_t{1} << 56;

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct EntryContext {
  std::string_view label;
  const std::string& name;

  Status Error(StatusCode code, std::string_view what) const {
    return Status(code, fmt::format("{}: tensor '{}' {}", label, ShortName(name), what));
  }
};

Result<uint64_t> NonNegativeInt(const nlohmann::json& v, const EntryContext& ctx,
                                std::string_view field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  return ctx.Error(StatusCode::kInvalidArgument,
                   fmt::format("has a {} entry that is not a non-negative integer", field));
}

Result<SafetensorsEntry> ParseEntry(const std::string& name, const nlohmann::json& v,
                                    uint64_t data_offset, uint64_t data_size,
                                    std::string_view label) {
  const EntryContext ctx{label, name};
  const auto inv = StatusCode::kInvalidArgument;
  if (!v.is_object()) return ctx.Error(inv, "is not a JSON object");
  const auto dtype_it = v.find("dtype");
  const auto shape_it = v.find("shape");
  const auto offsets_it = v.find("data_offsets");
  if (dtype_it == v.end() || !dtype_it->is_string()) return ctx.Error(inv, "has no string 'dtype'");
  if (shape_it == v.end() || !shape_it->is_array()) return ctx.Error(inv, "has no 'shape' list");
  if (offsets_it == v.end() || !offsets_it->is_array() || offsets_it->size() != 2)
    return ctx.Error(inv, "has no 'data_offsets' pair");

  SafetensorsEntry e;
  e.name = name;
  const auto& dtype_name = dtype_it->get_ref<const std::string&>();
  const auto dtype = DTypeFromSafetensors(dtype_name);
  if (!dtype)
    return ctx.Error(StatusCode::kUnimplemented,
                     fmt::format("has unknown or unsupported dtype '{}'", ShortName(dtype_name)));
  e.dtype = *dtype;

  if (shape_it->size() > static_cast<size_t>(kMaxDims))
    return ctx.Error(
        StatusCode::kUnimplemented,
        fmt::format("has {} dimensions; at most {} are supported", shape_it->size(), kMaxDims));
  uint64_t numel = 1;
  std::vector<int64_t> dims;
  for (const auto& d : *shape_it) {
    PG_ASSIGN_OR_RETURN(const uint64_t dim, NonNegativeInt(d, ctx, "shape"));
    if (dim > kMaxElements || (dim != 0 && numel > kMaxElements / dim))
      return ctx.Error(inv, "has a shape whose element count overflows");
    numel *= dim;
    dims.push_back(static_cast<int64_t>(dim));
  }
  e.shape = Shape::FromRange(dims.begin(), dims.end());

  PG_ASSIGN_OR_RETURN(const uint64_t begin, NonNegativeInt((*offsets_it)[0], ctx, "data_offsets"));
  PG_ASSIGN_OR_RETURN(const uint64_t end, NonNegativeInt((*offsets_it)[1], ctx, "data_offsets"));
  if (begin > end || end > data_size)
    return ctx.Error(StatusCode::kDataLoss,
                     fmt::format("has data_offsets [{}, {}] outside the {}-byte data area", begin,
                                 end, data_size));
  const uint64_t expected = DTypeBytes(e.dtype, numel);
  if (end - begin != expected)
    return ctx.Error(StatusCode::kDataLoss,
                     fmt::format("has {} bytes of data but {}{} needs {}", end - begin,
                                 DTypeSafetensorsName(e.dtype), e.shape.ToString(), expected));
  e.offset = data_offset + begin;
  e.num_bytes = expected;
  return e;
}

}  // namespace

std::string ShortName(std::string_view name) {
  constexpr size_t kMax = 160;
  if (name.size() <= kMax) return std::string(name);
  return fmt::format("{}...", name.substr(0, kMax));
}

namespace {

Result<SafetensorsHeader> ParseImage(std::span<const uint8_t> image, std::string_view label) {
  if (image.size() < 8)
    return DataLoss(fmt::format("{}: file is {} bytes, too short for the 8-byte header length",
                                label, image.size()));
  const uint64_t header_bytes = ReadLe64(image.data());
  if (header_bytes > kMaxSafetensorsHeaderBytes)
    return InvalidArgument(fmt::format("{}: header length {} exceeds the {}-byte limit", label,
                                       header_bytes, kMaxSafetensorsHeaderBytes));
  if (header_bytes > image.size() - 8)
    return DataLoss(fmt::format("{}: header length {} runs past the end of the {}-byte file", label,
                                header_bytes, image.size()));

  SafetensorsHeader header;
  header.data_offset = 8 + header_bytes;
  const uint64_t data_size = image.size() - header.data_offset;
  const auto* json_begin = reinterpret_cast<const char*>(image.data() + 8);
  const auto* json_end = json_begin + header_bytes;

  // nlohmann keeps the last of repeated keys; the callback sees every top-level key first.
  std::unordered_set<std::string> seen;
  std::string duplicate;
  const auto on_event = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& v) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && duplicate.empty() &&
        !seen.insert(v.get<std::string>()).second)
      duplicate = v.get<std::string>();
    return true;
  };
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_begin, json_end, on_event);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() quotes raw input bytes; the position is enough and keeps messages UTF-8 clean.
    return InvalidArgument(
        fmt::format("{}: header is not valid JSON (error near byte {})", label, e.byte));
  }
  if (!duplicate.empty())
    return InvalidArgument(
        fmt::format("{}: tensor '{}' appears twice in the header", label, ShortName(duplicate)));
  if (!doc.is_object())
    return InvalidArgument(fmt::format("{}: header is not a JSON object", label));

  for (const auto& [name, value] : doc.items()) {
    if (name == "__metadata__") continue;
    PG_ASSIGN_OR_RETURN(SafetensorsEntry e,
                        ParseEntry(name, value, header.data_offset, data_size, label));
    header.entries.push_back(std::move(e));
  }

  std::sort(header.entries.begin(), header.entries.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.offset != b.offset ? a.offset < b.offset : a.num_bytes < b.num_bytes;
            });
  const SafetensorsEntry* prev = nullptr;
  for (const SafetensorsEntry& e : header.entries) {
    if (e.num_bytes == 0) continue;
    if (prev != nullptr && e.offset < prev->offset + prev->num_bytes)
      return InvalidArgument(fmt::format(
          "{}: tensors '{}' and '{}' overlap (data_offsets [{}, {}] and [{}, {}])", label,
          ShortName(prev->name), ShortName(e.name), prev->offset - header.data_offset,
          prev->offset + prev->num_bytes - header.data_offset, e.offset - header.data_offset,
          e.offset + e.num_bytes - header.data_offset));
    prev = &e;
  }
  return header;
}

}  // namespace

Result<SafetensorsHeader> ParseSafetensors(std::span<const uint8_t> image, std::string_view label) {
  // Parse errors are handled inside; this catches allocation failures and anything else
  // nlohmann may throw, so no exception leaves the loader.
  try {
    return ParseImage(image, label);
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("{}: header could not be read ({})", label, e.what()));
  }
}

}  // namespace peregrine
