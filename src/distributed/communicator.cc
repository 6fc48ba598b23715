#include "distributed/communicator.h"
#include "distributed/nccl_communicator.h"

namespace peregrine::distributed {

int64_t CollectiveElementBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
    case DType::kI16:
      return 2;
    case DType::kF8E4M3:
    case DType::kUE8M0:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool:
      return 1;
    case DType::kI64:
      return 8;
    case DType::kE2M1:
      return 0;
  }
  return 0;
}

#if !PEREGRINE_HAVE_GLOO
Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const Rendezvous&) {
  return Unimplemented("this build has no CPU communicator (Gloo was not found when it was configured)");
}
#endif

#if !PEREGRINE_HAVE_NCCL
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const Rendezvous&, const NcclOptions&) {
  return Unimplemented("this build has no NCCL communicator (no CUDA toolkit with nccl.h when it was configured)");
}
Result<int> NcclLibraryVersion(const std::string&) { return Unimplemented("this build has no NCCL communicator"); }
#endif

}  // namespace peregrine::distributed
