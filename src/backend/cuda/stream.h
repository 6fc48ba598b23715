// RAII owners for CUDA streams, events and graphs. Every call maps failure to a Status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "base/status.h"

namespace peregrine::cuda {

// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
 public:
  static Result<Stream> Create();
  Stream() = default;
  Stream(Stream&& other) noexcept : stream_(other.stream_) { other.stream_ = nullptr; }
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  cudaStream_t get() const { return stream_; }
  // Blocks the host until all work enqueued so far has finished.
  Status Synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  // `timing` events can be used with ElapsedMs; others are cheaper to record and wait on.
  static Result<Event> Create(bool timing);
  Event() = default;
  Event(Event&& other) noexcept : event_(other.event_) { other.event_ = nullptr; }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  cudaEvent_t get() const { return event_; }
  Status Record(cudaStream_t stream);
  Status Synchronize() const;
  // Milliseconds between two recorded timing events (both must have completed).
  static Result<float> ElapsedMs(const Event& start, const Event& end);

 private:
  cudaEvent_t event_ = nullptr;
};

// A counter in mapped pinned host memory that a stream can wait on (the driver's stream
// memory operations): work enqueued behind Wait(stream, v) starts once the host has called
// Open(v') with v' >= v. Host writes made before Open are visible to that work. A gate never
// opened blocks its stream forever, so owners open it on every path (Close does, to the
// largest value, before the gate is freed).
class HostGate {
 public:
  static Result<HostGate> Create();
  HostGate() = default;
  HostGate(HostGate&& other) noexcept { *this = std::move(other); }
  HostGate& operator=(HostGate&& other) noexcept;
  HostGate(const HostGate&) = delete;
  HostGate& operator=(const HostGate&) = delete;
  ~HostGate();

  Status Wait(cudaStream_t stream, uint32_t value) const;
  void Open(uint32_t value);
  bool valid() const { return host_ != nullptr; }

 private:
  uint32_t* host_ = nullptr;
  void* device_ = nullptr;
};

// A captured and instantiated CUDA graph. Capture in thread-local mode: only work enqueued
// by the capturing thread on `stream` between BeginCapture and EndCapture is recorded, and
// that work must be capture-safe (no synchronisation, no allocation).
class Graph {
 public:
  Graph() = default;
  Graph(Graph&& other) noexcept : graph_(other.graph_), exec_(other.exec_) {
    other.graph_ = nullptr;
    other.exec_ = nullptr;
  }
  Graph& operator=(Graph&& other) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();

  static Status BeginCapture(cudaStream_t stream);
  // Ends the capture started on `stream` and instantiates it. On failure the capture is
  // still ended, so the stream is usable again.
  static Result<Graph> EndCapture(cudaStream_t stream);
  Status Launch(cudaStream_t stream) const;

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace peregrine::cuda
