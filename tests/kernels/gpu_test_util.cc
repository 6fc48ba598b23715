#include "gpu_test_util.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <limits>
#include <sstream>

#include "backend/cuda/device.h"
#include "backend/cuda/ops/sparse_attention.h"

namespace peregrine::testing {

bool HasCudaDevice() { return !cuda::ListDevices().empty(); }

int DeviceSmCount() {
  const auto devices = cuda::ListDevices();
  return devices.empty() ? 1 : devices.front().num_sms;
}

Tolerance ToleranceFor(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {1e-5, 1e-4};
    case DType::kBF16:
      // One bf16 rounding of the result (2^-8 relative) plus bf16 intermediates.
      return {4e-3, 1.6e-2};
    default:
      return {0.0, 0.0};
  }
}

::testing::AssertionResult AllClose(std::span<const float> got, std::span<const float> want, Tolerance tol,
                                    const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  double max_want = 0.0;
  for (float w : want) max_want = std::max(max_want, static_cast<double>(std::fabs(w)));
  size_t worst = 0;
  double worst_excess = -std::numeric_limits<double>::infinity();
  size_t num_bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i];
    const double w = want[i];
    const double allowed = tol.abs * max_want + tol.rel * std::fabs(w);
    const double excess = std::isnan(g) || std::isnan(w) ? std::numeric_limits<double>::infinity()
                                                          : std::fabs(g - w) - allowed;
    if (excess > 0) ++num_bad;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  std::ostringstream msg;
  if (!got.empty()) {
    const double allowed = tol.abs * max_want + tol.rel * std::fabs(want[worst]);
    msg << what << ": worst element " << worst << " of " << got.size() << ": got " << got[worst] << ", want "
        << want[worst] << ", |diff| " << std::fabs(static_cast<double>(got[worst]) - want[worst]) << ", allowed "
        << allowed << " (max |want| " << max_want << ")";
  }
  if (num_bad == 0) return ::testing::AssertionSuccess() << msg.str();
  return ::testing::AssertionFailure() << num_bad << " elements out of tolerance; " << msg.str();
}

std::vector<uint16_t> ToBF16(std::span<const float> v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = F32ToBF16(v[i]);
  return out;
}

std::vector<float> FromBF16(std::span<const uint16_t> v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = BF16ToF32(v[i]);
  return out;
}

std::vector<float> RoundedBF16(std::span<const float> v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = RoundBF16(v[i]);
  return out;
}

std::vector<float> RandomNormal(std::mt19937& rng, size_t n, float stddev) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> RandomUniform(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

void MakeRopeTables(int64_t num_positions, int64_t rope_dim, double theta, std::vector<float>& cos,
                    std::vector<float>& sin) {
  const int64_t half = rope_dim / 2;
  cos.resize(static_cast<size_t>(num_positions * half));
  sin.resize(cos.size());
  for (int64_t p = 0; p < num_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rope_dim));
      const double angle = static_cast<double>(p) * inv_freq;
      cos[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(angle));
      sin[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(angle));
    }
  }
}

void GpuTest::SetUp() {
  if (!HasCudaDevice()) GTEST_SKIP() << "no CUDA device";
  allocator_ = std::make_unique<cuda::CachingAllocator>(raw_);
  auto stream = cuda::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();
  stream_ = std::move(stream).value();
  const Status prepared = cuda::PrepareSparseAttention();
  ASSERT_TRUE(prepared.ok()) << prepared.ToString();
}

void BlasGpuTest::SetUp() {
  GpuTest::SetUp();
  if (IsSkipped() || HasFatalFailure()) return;
  auto blas = cuda::Blas::Create(*allocator_);
  ASSERT_TRUE(blas.ok()) << blas.status().ToString();
  blas_ = std::move(blas).value();
}

void GpuTest::TearDown() {
  if (allocator_ != nullptr) {
    const cudaError_t error = cudaStreamSynchronize(stream_.get());
    EXPECT_EQ(error, cudaSuccess) << cudaGetErrorString(error);
  }
}

cuda::DeviceBuffer GpuTest::UploadBytes(const void* data, size_t bytes) {
  auto buffer = allocator_->Allocate(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
  if (!buffer.ok()) return {};
  CopyIn(*buffer, data, bytes);
  return std::move(buffer).value();
}

void GpuTest::CopyIn(const cuda::DeviceBuffer& dst, const void* data, size_t bytes) {
  if (bytes == 0) return;
  EXPECT_LE(bytes, dst.capacity());
  EXPECT_EQ(cudaMemcpyAsync(dst.data(), data, bytes, cudaMemcpyHostToDevice, stream_.get()), cudaSuccess);
  Sync();
}

cuda::DeviceBuffer GpuTest::Poisoned(size_t bytes, int poison_byte) {
  auto buffer = allocator_->Allocate(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
  if (!buffer.ok()) return {};
  Poison(*buffer, poison_byte);
  return std::move(buffer).value();
}

void GpuTest::Poison(const cuda::DeviceBuffer& buffer, int poison_byte) {
  if (buffer.empty()) return;
  EXPECT_EQ(cudaMemsetAsync(buffer.data(), poison_byte, buffer.capacity(), stream_.get()), cudaSuccess);
}

void GpuTest::DownloadBytes(const cuda::DeviceBuffer& buffer, void* out, size_t bytes) {
  if (bytes == 0) return;
  EXPECT_EQ(cudaMemcpyAsync(out, buffer.data(), bytes, cudaMemcpyDeviceToHost, stream_.get()), cudaSuccess);
  Sync();
}

std::vector<float> GpuTest::DownloadBF16(const cuda::DeviceBuffer& buffer, size_t count) {
  return FromBF16(Download<uint16_t>(buffer, count));
}

void GpuTest::Sync() {
  const cudaError_t error = cudaStreamSynchronize(stream_.get());
  ASSERT_EQ(error, cudaSuccess) << cudaGetErrorName(error) << ": " << cudaGetErrorString(error);
}

void GpuTest::UploadSharedRows(std::span<const int32_t> per_request, int64_t batch, int64_t max_pages,
                               cuda::DeviceBuffer* table_d, cuda::DeviceBuffer* rows_d, Tensor* table, Tensor* rows) {
  const SharedPageTable shared = ShareRows(per_request, batch, max_pages);
  *table_d = Upload(shared.table);
  *rows_d = Upload(shared.rows);
  *table = View(*table_d, DType::kI32, {shared.num_tables, max_pages});
  *rows = View(*rows_d, DType::kI32, {batch});
}

SharedPageTable ShareRows(std::span<const int32_t> per_request, int64_t batch, int64_t max_pages) {
  SharedPageTable t;
  t.num_tables = batch + 3;
  t.table.assign(static_cast<size_t>(t.num_tables * max_pages), -1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t row = batch - 1 - b + 2;
    t.rows.push_back(static_cast<int32_t>(row));
    std::copy_n(per_request.begin() + b * max_pages, max_pages, t.table.begin() + row * max_pages);
  }
  return t;
}

}  // namespace peregrine::testing
