#include "backend/cuda/stream.h"

#include "backend/cuda/cuda_status.h"

namespace peregrine::cuda {

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
