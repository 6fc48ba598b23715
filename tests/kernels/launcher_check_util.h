// Helpers for the tests that CUDA launchers refuse bad arguments before anything reaches the
// device: the tensors carry made-up device addresses (the checks read shapes, dtypes and
// alignment only), and a refusal must be InvalidArgument naming the offending tensor.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine::testing {

inline Tensor FakeDeviceTensor(uintptr_t address, DType dtype, Shape shape) {
  return Tensor::Contiguous(reinterpret_cast<void*>(address), dtype, shape, Device::kCuda);
}

inline void ExpectInvalidNaming(const Status& s, const std::string& name) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.ToString().find(name), std::string::npos) << s.ToString() << " should name " << name;
}

}  // namespace peregrine::testing
