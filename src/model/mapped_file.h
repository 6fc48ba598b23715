// MappedFile: a whole file mapped read-only (PROT_READ, MAP_PRIVATE). The bytes stay valid
// and never move while the MappedFile lives; moving it keeps the mapping. Nothing is copied:
// pages are read from the page cache on first touch and can be dropped by the kernel.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "base/status.h"

namespace peregrine {

class MappedFile {
 public:
  // NotFound when the file does not exist, DataLoss when it cannot be read or mapped.
  // An empty file maps to an empty span.
  static Result<MappedFile> Open(const std::filesystem::path& path);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  void Unmap();

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace peregrine
