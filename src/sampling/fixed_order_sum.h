// A double sum of floats or doubles in one fixed order: four running sums (element i goes to sum
// i % 4 in the unrolled part, the tail to the first), combined as (s0 + s1) + (s2 + s3). Four
// chains hide the add latency; the fixed order keeps results reproducible.
#pragma once

#include <cstddef>

namespace peregrine {

template <typename T>
double FixedOrderSum(const T* x, size_t n) {
  double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += static_cast<double>(x[i]);
    s1 += static_cast<double>(x[i + 1]);
    s2 += static_cast<double>(x[i + 2]);
    s3 += static_cast<double>(x[i + 3]);
  }
  for (; i < n; ++i) s0 += static_cast<double>(x[i]);
  return (s0 + s1) + (s2 + s3);
}

}  // namespace peregrine
