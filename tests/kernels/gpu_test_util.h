// Shared helpers for the CUDA kernel tests: device discovery (tests skip without a GPU),
// uploads and downloads through the caching allocator, bf16 conversion, random inputs,
// output poisoning, and the per-dtype comparison that reports the worst element.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/blas.h"
#include "backend/cuda/stream.h"
#include "base/dtype.h"
#include "base/tensor.h"

namespace peregrine::testing {

bool HasCudaDevice();
// Streaming multiprocessors of device 0 (the schedule size a real launch would use).
int DeviceSmCount();

// Allowed error |got - want| <= abs * max|want| + rel * |want|.
struct Tolerance {
  double abs;
  double rel;
};
// The per-dtype table (by the dtype of the result compared).
Tolerance ToleranceFor(DType dtype);

// Compares element by element. On failure the message names the worst element (index, got,
// want, allowed error); NaN in `got` always fails (poisoned outputs that were not written).
::testing::AssertionResult AllClose(std::span<const float> got, std::span<const float> want, Tolerance tol,
                                    const std::string& what);

std::vector<uint16_t> ToBF16(std::span<const float> v);
std::vector<float> FromBF16(std::span<const uint16_t> v);
// Rounds each value through bf16 (what the device will see of a bf16 input).
std::vector<float> RoundedBF16(std::span<const float> v);

std::vector<float> RandomNormal(std::mt19937& rng, size_t n, float stddev = 1.0f);
std::vector<float> RandomUniform(std::mt19937& rng, size_t n, float lo, float hi);

// RoPE tables [num_positions, rope_dim / 2] for a plain rotary embedding with base `theta`.
// A per-request page table [B, max_pages] laid out as block tables are: one table of B + 3
// rows (requests' rows in reverse order from row 2, the spare rows all -1) and the row of
// each request, for kernels that take page_table_rows.
struct SharedPageTable {
  std::vector<int32_t> table;  // [num_tables, max_pages]
  std::vector<int32_t> rows;   // [B]
  int64_t num_tables = 0;
};
SharedPageTable ShareRows(std::span<const int32_t> per_request, int64_t batch, int64_t max_pages);

void MakeRopeTables(int64_t num_positions, int64_t rope_dim, double theta, std::vector<float>& cos,
                    std::vector<float>& sin);

// Base for GPU tests: skips without a device; owns an allocator and a stream.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Uploads a per-request page table [B, max_pages] as ShareRows lays it out and points the
  // views at it: `table` [num_tables, max_pages], `rows` [B].
  void UploadSharedRows(std::span<const int32_t> per_request, int64_t batch, int64_t max_pages,
                        cuda::DeviceBuffer* table_d, cuda::DeviceBuffer* rows_d, Tensor* table, Tensor* rows);

  // Device copy of `host` (synchronous).
  template <typename T>
  cuda::DeviceBuffer Upload(std::span<const T> host) {
    return UploadBytes(host.data(), host.size_bytes());
  }
  template <typename T>
  cuda::DeviceBuffer Upload(const std::vector<T>& host) {
    return UploadBytes(host.data(), host.size() * sizeof(T));
  }
  cuda::DeviceBuffer UploadBytes(const void* data, size_t bytes);
  // Overwrites an existing device buffer (synchronous).
  void CopyIn(const cuda::DeviceBuffer& dst, const void* data, size_t bytes);
  template <typename T>
  void CopyIn(const cuda::DeviceBuffer& dst, const std::vector<T>& host) {
    CopyIn(dst, host.data(), host.size() * sizeof(T));
  }
  // An uninitialised device buffer filled with `poison_byte` (0xff: NaN in f32 and bf16).
  cuda::DeviceBuffer Poisoned(size_t bytes, int poison_byte = 0xff);
  void Poison(const cuda::DeviceBuffer& buffer, int poison_byte = 0xff);
  template <typename T>
  std::vector<T> Download(const cuda::DeviceBuffer& buffer, size_t count) {
    std::vector<T> host(count);
    DownloadBytes(buffer, host.data(), count * sizeof(T));
    return host;
  }
  void DownloadBytes(const cuda::DeviceBuffer& buffer, void* out, size_t bytes);
  // bf16 device data as floats.
  std::vector<float> DownloadBF16(const cuda::DeviceBuffer& buffer, size_t count);
  void Sync();

  static Tensor View(const cuda::DeviceBuffer& buffer, DType dtype, Shape shape) {
    return Tensor::Contiguous(buffer.data(), dtype, shape, Device::kCuda);
  }

  cuda::CudaRawAllocator raw_;
  std::unique_ptr<cuda::CachingAllocator> allocator_;
  cuda::Stream stream_;
};

// GpuTest with a cuBLAS handle on the test's allocator (the projection tests).
class BlasGpuTest : public GpuTest {
 protected:
  void SetUp() override;
  cuda::Blas blas_;
};

}  // namespace peregrine::testing

// Fails the test with the Status message when `expr` is not ok.
#define PG_ASSERT_OK(expr)                                \
  do {                                                    \
    const ::peregrine::Status pg_s_ = (expr);             \
    ASSERT_TRUE(pg_s_.ok()) << pg_s_.ToString();          \
  } while (0)
