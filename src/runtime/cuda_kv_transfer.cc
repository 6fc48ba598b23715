// CudaModelRunner's half of disaggregated serving: a slot's state and its blocks' entries
// copied between the device pools and host pages (DeviceModel::SlotRegions / BlockRegions).
#include <cuda_runtime_api.h>

#include <cstring>

#include "backend/cuda/cuda_status.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/kv_sizing.h"

namespace peregrine {

namespace {

size_t TotalBytes(const std::vector<DeviceRegion>& regions) {
  size_t n = 0;
  for (const DeviceRegion& r : regions) n += r.bytes;
  return n;
}

}  // namespace

Status CudaModelRunner::ExportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                                 std::vector<std::vector<uint8_t>>* pages) {
  const KvCapacity& c = executor_->kv_capacity();
  if (slot < 0 || slot >= c.num_slots) return InvalidArgument("KV slot outside the pools");
  if (slot_positions_[static_cast<size_t>(slot)] != num_tokens)
    return Internal("the slot does not hold " + std::to_string(num_tokens) + " positions to export");
  if (static_cast<int64_t>(blocks.size()) != c.layout.BlocksFor(num_tokens))
    return InvalidArgument("the block table does not match the exported positions");
  DeviceModel& model = executor_->model();
  pages->clear();
  // The positions were computed by a collected step and nothing newer writes this slot or
  // these blocks (the request has finished), so a copy beside the executor's stream (the
  // legacy stream: cudaMemcpy, synchronous for pageable memory) reads them whole.
  auto pack = [&](const std::vector<DeviceRegion>& regions) -> Status {
    std::vector<uint8_t>& page = pages->emplace_back(TotalBytes(regions));
    size_t at = 0;
    for (const DeviceRegion& r : regions) {
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(page.data() + at, r.data, r.bytes, cudaMemcpyDeviceToHost));
      at += r.bytes;
    }
    return Status::Ok();
  };
  const std::vector<DeviceRegion> slot_regions = model.SlotRegions(slot);
  if (slot_regions.empty()) return Unimplemented("this model cannot export its KV");
  PG_RETURN_IF_ERROR(pack(slot_regions));
  for (int32_t b : blocks) {
    if (b < 0 || b >= c.num_blocks) return InvalidArgument("block id outside the pools");
    PG_RETURN_IF_ERROR(pack(model.BlockRegions(b)));
  }
  return Status::Ok();
}

Status CudaModelRunner::ImportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                                 std::span<const std::vector<uint8_t>> pages) {
  const KvCapacity& c = executor_->kv_capacity();
  if (slot < 0 || slot >= c.num_slots) return InvalidArgument("KV slot outside the pools");
  if (num_tokens <= 0 || num_tokens >= max_context()) return InvalidArgument("imported positions outside the context");
  if (static_cast<int64_t>(blocks.size()) != c.layout.BlocksFor(num_tokens))
    return InvalidArgument("the block table does not match the imported positions");
  if (pages.size() != blocks.size() + 1)
    return InvalidArgument("expected " + std::to_string(blocks.size() + 1) + " KV pages, got " + std::to_string(pages.size()));
  DeviceModel& model = executor_->model();
  std::vector<std::vector<DeviceRegion>> where;
  where.push_back(model.SlotRegions(slot));
  if (where[0].empty()) return Unimplemented("this model cannot import KV");
  for (int32_t b : blocks) {
    if (b < 0 || b >= c.num_blocks) return InvalidArgument("block id outside the pools");
    where.push_back(model.BlockRegions(b));
  }
  for (size_t i = 0; i < where.size(); ++i)
    if (pages[i].size() != TotalBytes(where[i])) return InvalidArgument("a KV page does not fit this layout");
  slot_positions_[static_cast<size_t>(slot)] = -1;
  // On the executor's stream: a launched step of the slot's previous request may still write
  // its state; the next step of this one reads it after the copy.
  const cudaStream_t stream = executor_->stream();
  for (size_t i = 0; i < where.size(); ++i) {
    size_t at = 0;
    for (const DeviceRegion& r : where[i]) {
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(r.data, pages[i].data() + at, r.bytes, cudaMemcpyHostToDevice, stream));
      at += r.bytes;
    }
  }
  // The pages are the caller's: they must have been read before this returns.
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  slot_positions_[static_cast<size_t>(slot)] = num_tokens;
  return Status::Ok();
}

std::string CudaModelRunner::kv_fingerprint() const {
  if (executor_->model().SlotRegions(0).empty()) return {};
  return KvFingerprint("cuda-bf16/" + executor_->config().model_type + "/vocab=" +
                           std::to_string(executor_->config().vocab_size),
                       executor_->kv_capacity().layout);
}

}  // namespace peregrine
