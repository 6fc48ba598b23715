#include "base/tensor.h"

namespace peregrine {

std::string Shape::ToString() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return s + "]";
}

bool Tensor::is_contiguous() const {
  int64_t s = 1;
  for (int i = ndim() - 1; i >= 0; --i) {
    if (shape[i] != 1 && stride(i) != s) return false;
    s *= shape[i];
  }
  return true;
}

std::string Tensor::ToString() const {
  return std::string(DTypeName(dtype)) + shape.ToString();
}

}  // namespace peregrine
