// Device discovery and selection for the CUDA backend.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace peregrine::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  int num_sms = 0;
  size_t total_memory = 0;
  size_t l2_bytes = 0;
};

// Every visible device; an empty list (not an error) when the machine has no GPU or driver.
std::vector<DeviceInfo> ListDevices();
// Makes `index` current on the calling thread.
Status SelectDevice(int index);

}  // namespace peregrine::cuda
