#include "cuda_thread_group.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <string>

#include "base/dtype.h"

namespace peregrine::testing {

ThreadGroup::ThreadGroup(int size) : size_(size), staged_(static_cast<size_t>(size), nullptr) {}

bool ThreadGroup::Arrive() {
  std::unique_lock<std::mutex> lock(mu_);
  if (broken_) return false;
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return true;
  }
  if (!cv_.wait_for(lock, std::chrono::seconds(60), [&] { return generation_ != generation || broken_; })) {
    broken_ = true;
    cv_.notify_all();
  }
  return !broken_;
}

class ThreadGroupMember final : public distributed::Communicator {
 public:
  ThreadGroupMember(ThreadGroup& group, int rank) : group_(group), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return group_.size_; }
  const char* name() const override { return "thread-group"; }
  void UseStream(void* stream) override { stream_ = static_cast<cudaStream_t>(stream); }

  Status AllReduceSum(void* buf, int64_t count, DType dtype) override {
    if (dtype != DType::kBF16 && dtype != DType::kF32) return InvalidArgument("thread group: sums bf16 or f32");
    std::vector<uint8_t> mine;
    PG_RETURN_IF_ERROR(Stage(buf, count, dtype, &mine));
    std::vector<float> sum(static_cast<size_t>(count), 0.0f);
    for (int r = 0; r < size(); ++r) {
      const std::vector<uint8_t>& part = *group_.staged_[static_cast<size_t>(r)];
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += Element(part, i, dtype);
    }
    PG_RETURN_IF_ERROR(Meet());  // every rank has read the others' buffers
    std::vector<uint8_t> out(mine.size());
    for (size_t i = 0; i < sum.size(); ++i) {
      if (dtype == DType::kF32) {
        std::memcpy(out.data() + 4 * i, &sum[i], 4);
      } else {
        const uint16_t v = F32ToBF16(sum[i]);
        std::memcpy(out.data() + 2 * i, &v, 2);
      }
    }
    return Unstage(out, buf);
  }

  Status AllGather(const void* in, void* out, int64_t count, DType dtype) override {
    std::vector<uint8_t> mine, all;
    PG_RETURN_IF_ERROR(Stage(in, count, dtype, &mine));
    for (int r = 0; r < size(); ++r) {
      const std::vector<uint8_t>& part = *group_.staged_[static_cast<size_t>(r)];
      all.insert(all.end(), part.begin(), part.end());
    }
    PG_RETURN_IF_ERROR(Meet());
    return Unstage(all, out);
  }

  Status Broadcast(void* buf, int64_t count, DType dtype, int root) override {
    if (root < 0 || root >= size()) return InvalidArgument("thread group: broadcast root outside the group");
    std::vector<uint8_t> mine;
    PG_RETURN_IF_ERROR(Stage(buf, count, dtype, &mine));
    const std::vector<uint8_t> from_root = *group_.staged_[static_cast<size_t>(root)];
    PG_RETURN_IF_ERROR(Meet());
    return Unstage(from_root, buf);
  }

  Status ReduceScatterSum(const void*, void*, int64_t, DType) override { return Unsupported("reduce-scatter"); }
  Status AllToAll(const void*, void*, int64_t, DType) override { return Unsupported("all-to-all"); }
  Status Send(const void*, int64_t, DType, int) override { return Unsupported("send"); }
  Status Recv(void*, int64_t, DType, int) override { return Unsupported("receive"); }
  Status Barrier() override { return Meet(); }

 private:
  static Status Unsupported(const char* what) {
    return Unimplemented(std::string("the test thread group has no ") + what);
  }
  static Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    return Internal(std::string(what) + ": " + cudaGetErrorString(e));
  }
  static float Element(const std::vector<uint8_t>& bytes, size_t i, DType dtype) {
    if (dtype == DType::kF32) {
      float v;
      std::memcpy(&v, bytes.data() + 4 * i, 4);
      return v;
    }
    uint16_t v;
    std::memcpy(&v, bytes.data() + 2 * i, 2);
    return BF16ToF32(v);
  }

  // Waits for the stream, copies the device buffer into `mine` and publishes it; returns once
  // every rank has.
  Status Stage(const void* buf, int64_t count, DType dtype, std::vector<uint8_t>* mine) {
    const int64_t element = distributed::CollectiveElementBytes(dtype);
    if (element == 0 || count < 0) return InvalidArgument("thread group: a whole-byte dtype and a count >= 0");
    PG_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "stream"));
    mine->resize(static_cast<size_t>(count * element));
    if (!mine->empty()) {
      PG_RETURN_IF_ERROR(
          Cuda(cudaMemcpyAsync(mine->data(), buf, mine->size(), cudaMemcpyDeviceToHost, stream_), "copy"));
      PG_RETURN_IF_ERROR(Cuda(cudaStreamSynchronize(stream_), "stream"));
    }
    group_.staged_[static_cast<size_t>(rank_)] = mine;
    return Meet();
  }

  // On the member's stream, waited for: a plain cudaMemcpy from pageable memory may return
  // before its bytes land, and the stream's next kernels would read the old ones.
  Status Unstage(const std::vector<uint8_t>& bytes, void* buf) {
    if (bytes.empty()) return Status::Ok();
    PG_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(buf, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream_), "copy"));
    return Cuda(cudaStreamSynchronize(stream_), "stream");
  }

  Status Meet() {
    if (group_.Arrive()) return Status::Ok();
    return DeadlineExceeded("thread group: a rank did not arrive (the group is broken)");
  }

  ThreadGroup& group_;
  int rank_;
  cudaStream_t stream_ = nullptr;
};

std::unique_ptr<distributed::Communicator> ThreadGroup::Member(int rank) {
  return std::make_unique<ThreadGroupMember>(*this, rank);
}

}  // namespace peregrine::testing
