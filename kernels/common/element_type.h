// Element types a kernel's params can name at run time (host and device). Kernels turn
// them into template arguments through their constexpr tables.
#pragma once

#include <cstdint>

namespace peregrine::kernels {

enum class ElementType : uint8_t {
  kF32,
  kBF16,
};

}  // namespace peregrine::kernels
