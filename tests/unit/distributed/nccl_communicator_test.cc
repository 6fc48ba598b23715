// The NCCL communicator on the GPU: one rank through the whole path (library load, rendezvous
// skipped, communicator init, every collective on device buffers, barrier). Several ranks need
// several GPUs (NCCL refuses two ranks on one device); the collectives' arithmetic across ranks
// is the CPU communicator's test.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "distributed/nccl_communicator.h"

namespace peregrine::distributed {
namespace {

TEST(NcclCommunicatorGpuTest, OneRankRunsEveryCollectiveOnDeviceBuffers) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  auto version = NcclLibraryVersion("libnccl.so.2");
  ASSERT_TRUE(version.ok()) << version.status().ToString();
  std::printf("NCCL %d\n", *version);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  NcclOptions o;
  o.stream = stream;
  Rendezvous r;
  auto comm = CreateNcclCommunicator(r, o);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();
  EXPECT_STREQ((*comm)->name(), "nccl");
  const std::vector<float> host = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f};
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, 64 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, 64 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(a, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  const int64_t n = static_cast<int64_t>(host.size());
  EXPECT_TRUE((*comm)->AllReduceSum(a, n, DType::kF32).ok());
  EXPECT_TRUE((*comm)->AllGather(a, b, n, DType::kF32).ok());
  EXPECT_TRUE((*comm)->Broadcast(b, n, DType::kF32, 0).ok());
  EXPECT_TRUE((*comm)->ReduceScatterSum(b, a, n, DType::kF32).ok());
  EXPECT_TRUE((*comm)->AllToAll(a, b, n, DType::kF32).ok());
  EXPECT_TRUE((*comm)->Barrier().ok());
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), b, back.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host) << "one rank's collectives are the identity";
  EXPECT_EQ((*comm)->AllReduceSum(a, 1, DType::kE2M1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*comm)->Broadcast(a, 1, DType::kF32, 1).code(), StatusCode::kInvalidArgument);
  comm->reset();
  cudaFree(a);
  cudaFree(b);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace peregrine::distributed
