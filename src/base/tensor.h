// Tensor: a non-owning view (data pointer, dtype, device, shape, strides in elements).
// Owners are buffers (host vectors, mapped files, device allocations); a view never frees.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/check.h"
#include "base/dtype.h"

namespace peregrine {

enum class Device : uint8_t { kCpu, kCuda };

inline constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    PG_CHECK(dims.size() <= kMaxDims);
    for (int64_t d : dims) dims_[ndim_++] = d;
  }
  template <typename It>
  static Shape FromRange(It begin, It end) {
    Shape s;
    for (It it = begin; it != end; ++it) {
      PG_CHECK(s.ndim_ < kMaxDims);
      s.dims_[s.ndim_++] = static_cast<int64_t>(*it);
    }
    return s;
  }

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i < 0 ? i + ndim_ : i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i < 0 ? i + ndim_ : i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[static_cast<size_t>(i)];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (ndim_ != o.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
      if (dims_[static_cast<size_t>(i)] != o.dims_[static_cast<size_t>(i)]) return false;
    return true;
  }
  std::string ToString() const;

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Device device = Device::kCpu;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // in elements

  static Tensor Contiguous(void* data, DType dtype, Shape shape, Device device = Device::kCpu) {
    Tensor t{data, dtype, device, shape, {}};
    int64_t s = 1;
    for (int i = shape.ndim() - 1; i >= 0; --i) {
      t.strides[static_cast<size_t>(i)] = s;
      s *= shape[i];
    }
    return t;
  }
  int ndim() const { return shape.ndim(); }
  int64_t numel() const { return shape.numel(); }
  int64_t stride(int i) const { return strides[static_cast<size_t>(i < 0 ? i + ndim() : i)]; }
  bool is_contiguous() const;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  std::string ToString() const;  // "bf16[4, 8]" for messages
};

}  // namespace peregrine
