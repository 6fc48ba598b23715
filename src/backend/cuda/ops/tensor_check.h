// Launcher-side argument checks: every tensor's dtype, device, rank, shape (against named
// dimensions), row-major contiguity and alignment, with messages that name the op, the
// tensor and the dimension. Host code only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::cuda {

// A named dimension. A free one is bound by the first tensor that uses it and every later use
// must agree; a fixed one is known up front (a config value, a kernel's compile-time size).
class Dim {
 public:
  explicit Dim(const char* name) : name_(name) {}
  Dim(const char* name, int64_t value) : name_(name), value_(value), bound_(true) {}

  const char* name() const { return name_; }
  bool is_bound() const { return bound_; }
  int64_t value() const { return value_; }  // meaningful once bound
  void Bind(int64_t value) {
    value_ = value;
    bound_ = true;
  }
  std::string ToString() const;  // "B=3" or "B"

 private:
  const char* name_;
  int64_t value_ = 0;
  bool bound_ = false;
};

// Checks the tensors of one op call. Each method returns InvalidArgument naming the op and
// the tensor on a mismatch, and binds the free dimensions it meets on success.
class TensorChecker {
 public:
  explicit TensorChecker(std::string_view op) : op_(op) {}

  // `t` must be `dtype` on `device`, row-major contiguous, its data aligned to `alignment`
  // bytes and shaped exactly `shape`.
  Status Check(std::string_view name, const Tensor& t, DType dtype, std::initializer_list<Dim*> shape,
               Device device = Device::kCuda, int64_t alignment = 16);
  // The same, but an absent tensor (null data) is accepted.
  Status CheckOptional(std::string_view name, const Tensor& t, DType dtype, std::initializer_list<Dim*> shape,
                       Device device = Device::kCuda, int64_t alignment = 16);
  // A scalar precondition; `what` says what was expected.
  Status Require(bool condition, std::string_view what) const;

 private:
  std::string op_;
};

}  // namespace peregrine::cuda
