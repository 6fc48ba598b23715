// Safetensors header parsing and validation over an in-memory file image (a mapped file or
// fuzzer bytes; no I/O here). Layout: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then the data
// area, to which the offsets are relative.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "base/tensor.h"

namespace peregrine {

// HF safetensors refuses larger headers too; it bounds the JSON we parse for a crafted file.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;             // as stored (I8-packed MXFP4 experts have half the logical columns)
  uint64_t offset = 0;     // absolute byte offset in the file image
  uint64_t num_bytes = 0;  // == DTypeBytes(dtype, shape.numel())
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;               // 8 + header length
  std::vector<SafetensorsEntry> entries;  // in data order
};

// Validates everything a reader relies on: the header length against the file size and the
// cap, JSON syntax and types, known dtypes, non-negative shapes whose element count does not
// overflow, offsets inside the data area, byte length == dtype x shape, no two tensors
// overlapping, no name twice. Errors start with `label` (the file's path) and name the tensor.
// DataLoss for truncation and inconsistency, InvalidArgument for malformed headers,
// Unimplemented for valid dtypes/ranks this engine has no type for.
Result<SafetensorsHeader> ParseSafetensors(std::span<const uint8_t> image, std::string_view label);

// A tensor name shortened for messages (headers may hold arbitrarily long names).
std::string ShortName(std::string_view name);

}  // namespace peregrine
