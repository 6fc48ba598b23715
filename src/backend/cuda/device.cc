#include "backend/cuda/device.h"

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_status.h"

namespace peregrine::cuda {

std::vector<DeviceInfo> ListDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear "no device"/"no driver" so later calls start clean
    return {};
  }
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    devices.push_back({i, p.name, p.major, p.minor, p.multiProcessorCount, p.totalGlobalMem,
                       static_cast<size_t>(p.l2CacheSize)});
  }
  return devices;
}

Status SelectDevice(int index) {
  PG_CUDA_RETURN_IF_ERROR(cudaSetDevice(index));
  return Status::Ok();
}

}  // namespace peregrine::cuda
