// Test helper: builds safetensors file images in memory (valid ones, or crafted broken ones
// from a hand-written header) and writes them to disk, so no binary fixtures are committed.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace peregrine::testing {

// `header_json` verbatim after its 8-byte length, then `data`.
inline std::vector<uint8_t> RawSafetensors(std::string_view header_json,
                                           const std::vector<uint8_t>& data = {}) {
  std::vector<uint8_t> out(8 + header_json.size() + data.size());
  const uint64_t n = header_json.size();
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header_json.empty()) std::memcpy(out.data() + 8, header_json.data(), header_json.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header_json.size(), data.data(), data.size());
  return out;
}

template <typename T>
std::vector<uint8_t> Bytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), values.data(), out.size());
  return out;
}

// Tensors laid out back to back in insertion order; the header is padded with spaces to a
// multiple of `align` bytes (8 like the Python writer; 1 gives unaligned data).
class SafetensorsBuilder {
 public:
  SafetensorsBuilder& Add(std::string name, std::string dtype, std::vector<int64_t> shape,
                          std::vector<uint8_t> bytes) {
    tensors_.push_back({std::move(name), std::move(dtype), std::move(shape), std::move(bytes)});
    return *this;
  }
  SafetensorsBuilder& F32(std::string name, std::vector<int64_t> shape,
                          const std::vector<float>& values) {
    return Add(std::move(name), "F32", std::move(shape), Bytes(values));
  }
  SafetensorsBuilder& Metadata(nlohmann::json metadata) {
    metadata_ = std::move(metadata);
    return *this;
  }

  nlohmann::json Header() const {
    nlohmann::json header = nlohmann::json::object();
    if (!metadata_.is_null()) header["__metadata__"] = metadata_;
    uint64_t offset = 0;
    for (const auto& t : tensors_) {
      header[t.name] = {{"dtype", t.dtype},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + t.bytes.size()}}};
      offset += t.bytes.size();
    }
    return header;
  }

  std::vector<uint8_t> Build(size_t align = 8) const {
    std::string header = Header().dump();
    while ((8 + header.size()) % align != 0) header.push_back(' ');
    size_t total = 0;
    for (const auto& t : tensors_) total += t.bytes.size();
    std::vector<uint8_t> data(total);
    size_t offset = 0;
    for (const auto& t : tensors_) {
      if (!t.bytes.empty()) std::memcpy(data.data() + offset, t.bytes.data(), t.bytes.size());
      offset += t.bytes.size();
    }
    return RawSafetensors(header, data);
  }

 private:
  struct Entry {
    std::string name;
    std::string dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Entry> tensors_;
  nlohmann::json metadata_;
};

inline void WriteBytes(const std::filesystem::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline void WriteText(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh empty directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  explicit TempDir(std::string_view tag) {
    path_ = std::filesystem::temp_directory_path() /
            (std::string("peregrine_") + std::string(tag) + "_" +
             std::to_string(reinterpret_cast<uintptr_t>(this)) + "_" +
             std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

}  // namespace peregrine::testing
