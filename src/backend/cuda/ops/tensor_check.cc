#include "backend/cuda/ops/tensor_check.h"

#include <cstdint>

namespace peregrine::cuda {

namespace {

const char* DeviceName(Device d) {
  switch (d) {
    case Device::kCpu:
      return "cpu";
    case Device::kCuda:
      return "cuda";
  }
  return "?";
}

std::string Expected(DType dtype, std::initializer_list<Dim*> shape, Device device) {
  std::string s = std::string(DTypeName(dtype)) + "[";
  bool first = true;
  for (const Dim* d : shape) {
    if (!first) s += ", ";
    first = false;
    s += d->ToString();
  }
  return s + "] on " + DeviceName(device);
}

}  // namespace

std::string Dim::ToString() const {
  return bound_ ? std::string(name_) + "=" + std::to_string(value_) : std::string(name_);
}

Status TensorChecker::Check(std::string_view name, const Tensor& t, DType dtype, std::initializer_list<Dim*> shape,
                            Device device, int64_t alignment) {
  const std::string expected = Expected(dtype, shape, device);
  auto fail = [&](std::string_view why) {
    return InvalidArgument(op_ + ": " + std::string(name) + ": expected " + expected + ", got " + t.ToString() +
                           " on " + DeviceName(t.device) + " (" + std::string(why) + ")");
  };
  if (t.data == nullptr) return fail("no data");
  if (t.dtype != dtype) return fail("dtype");
  if (t.device != device) return fail("device");
  if (t.ndim() != static_cast<int>(shape.size())) return fail("rank");
  int i = 0;
  for (Dim* d : shape) {
    const int64_t extent = t.shape[i];
    if (d->is_bound()) {
      if (extent != d->value()) return fail(std::string("dimension ") + d->name());
    } else {
      if (extent < 0) return fail(std::string("dimension ") + d->name());
      d->Bind(extent);
    }
    ++i;
  }
  if (!t.is_contiguous()) return fail("not row-major contiguous");
  if (alignment > 1 && reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(alignment) != 0)
    return fail("data not " + std::to_string(alignment) + "-byte aligned");
  return Status::Ok();
}

Status TensorChecker::CheckOptional(std::string_view name, const Tensor& t, DType dtype,
                                    std::initializer_list<Dim*> shape, Device device, int64_t alignment) {
  if (t.data == nullptr) return Status::Ok();
  return Check(name, t, dtype, shape, device, alignment);
}

Status TensorChecker::Require(bool condition, std::string_view what) const {
  if (condition) return Status::Ok();
  return InvalidArgument(op_ + ": " + std::string(what));
}

}  // namespace peregrine::cuda
