// Parses arbitrary bytes as a safetensors file image. An accepted header must describe only
// bytes inside the image, without overlaps, and every described tensor must read back through
// the name mapping and the f32 conversions without touching anything outside its range.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "model/dequant.h"
#include "model/safetensors.h"
#include "model/tensor_names.h"

namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine;
  const std::span<const uint8_t> image(data, size);
  const auto header = ParseSafetensors(image, "fuzz.safetensors");
  if (!header.ok()) {
    Require(!header.status().message().empty());
    return 0;
  }
  uint64_t previous_end = 0;
  std::vector<float> scratch;
  for (const SafetensorsEntry& e : header->entries) {
    Require(e.offset >= header->data_offset && e.offset <= size && e.num_bytes <= size - e.offset);
    Require(e.num_bytes == DTypeBytes(e.dtype, static_cast<size_t>(e.shape.numel())));
    if (e.num_bytes > 0) {
      Require(e.offset >= previous_end);  // entries come in data order
      previous_end = e.offset + e.num_bytes;
    }
    (void)MapStoredTensor(e.name, e.shape);
    if (IsElementwiseFloat(e.dtype) && e.shape.numel() <= 4096) {
      scratch.resize(static_cast<size_t>(e.shape.numel()));
      ConvertToF32(e.dtype, data + e.offset, scratch.size(), scratch.data());
    }
  }
  return 0;
}
