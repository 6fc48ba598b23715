// Maps base DTypes onto the element types kernel params name.
#pragma once

#include <optional>

#include "base/dtype.h"
#include "kernels/common/element_type.h"

namespace peregrine::cuda {

inline std::optional<kernels::ElementType> ToElementType(DType t) {
  if (t == DType::kF32) return kernels::ElementType::kF32;
  if (t == DType::kBF16) return kernels::ElementType::kBF16;
  return std::nullopt;
}

}  // namespace peregrine::cuda
