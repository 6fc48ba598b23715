#include "backend/cuda/stream.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <limits>
#include <string>
#include <utility>

#include "backend/cuda/cuda_status.h"

namespace peregrine::cuda {

namespace {

// cuStreamWaitValue32 from the driver the runtime loaded (the binary links no libcuda).
Result<PFN_cuStreamWaitValue32_v11070> WaitValueEntry() {
  static PFN_cuStreamWaitValue32_v11070 fn = nullptr;
  static cudaError_t error = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found);
    if (e != cudaSuccess) return e;
    if (found != cudaDriverEntryPointSuccess || p == nullptr) return cudaErrorNotSupported;
    fn = reinterpret_cast<PFN_cuStreamWaitValue32_v11070>(p);
    return cudaSuccess;
  }();
  PG_CUDA_RETURN_IF_ERROR(error);
  return fn;
}

}  // namespace

Result<HostGate> HostGate::Create() {
  HostGate g;
  void* host = nullptr;
  PG_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&host, sizeof(uint32_t), cudaHostAllocMapped));
  g.host_ = static_cast<uint32_t*>(host);
  *g.host_ = 0;
  PG_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&g.device_, host, 0));
  PG_RETURN_IF_ERROR(WaitValueEntry().status());
  return g;
}

HostGate& HostGate::operator=(HostGate&& other) noexcept {
  std::swap(host_, other.host_);  // `other` frees what this held
  std::swap(device_, other.device_);
  return *this;
}

HostGate::~HostGate() {
  if (host_ == nullptr) return;
  Open(std::numeric_limits<uint32_t>::max());
  (void)cudaFreeHost(host_);
  host_ = nullptr;
}

Status HostGate::Wait(cudaStream_t stream, uint32_t value) const {
  PG_ASSIGN_OR_RETURN(auto wait, WaitValueEntry());
  const CUresult r = wait(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(device_), value,
                          CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) return Internal("cuStreamWaitValue32 failed (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  return Status::Ok();
}

void HostGate::Open(uint32_t value) {
  // Everything written before this store is visible to the work the gate releases.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  reinterpret_cast<volatile uint32_t*>(host_)[0] = value;
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

Result<Stream> Stream::Create() {
  Stream s;
  PG_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.stream_, cudaStreamNonBlocking));
  return s;
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = other.stream_;
    other.stream_ = nullptr;
  }
  return *this;
}

Stream::~Stream() {
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

Status Stream::Synchronize() const {
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return Status::Ok();
}

Result<Event> Event::Create(bool timing) {
  Event e;
  PG_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&e.event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) (void)cudaEventDestroy(event_);
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

Event::~Event() {
  if (event_ != nullptr) (void)cudaEventDestroy(event_);
}

Status Event::Record(cudaStream_t stream) {
  PG_CUDA_RETURN_IF_ERROR(cudaEventRecord(event_, stream));
  return Status::Ok();
}

Status Event::Synchronize() const {
  PG_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(event_));
  return Status::Ok();
}

Result<float> Event::ElapsedMs(const Event& start, const Event& end) {
  float ms = 0.0f;
  PG_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.event_, end.event_));
  return ms;
}

Graph& Graph::operator=(Graph&& other) noexcept {
  if (this != &other) {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
    graph_ = other.graph_;
    exec_ = other.exec_;
    other.graph_ = nullptr;
    other.exec_ = nullptr;
  }
  return *this;
}

Graph::~Graph() {
  if (exec_ != nullptr) (void)cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) (void)cudaGraphDestroy(graph_);
}

Status Graph::BeginCapture(cudaStream_t stream) {
  PG_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  return Status::Ok();
}

Result<Graph> Graph::EndCapture(cudaStream_t stream) {
  Graph g;
  PG_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream, &g.graph_));
  PG_CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&g.exec_, g.graph_, 0));
  return g;
}

Status Graph::Launch(cudaStream_t stream) const {
  PG_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream));
  return Status::Ok();
}

}  // namespace peregrine::cuda
