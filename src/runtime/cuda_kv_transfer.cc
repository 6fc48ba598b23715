// CudaModelRunner's half of disaggregated serving: a slot's state and its blocks' entries
// (DeviceModel::SlotRegions / BlockRegions) exported to host pages or to the CUDA-IPC staging
// arena, and imported from either.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstring>

#include "backend/cuda/cuda_status.h"
#include "base/log.h"
#include "runtime/cuda_model_runner.h"
#include "runtime/kv_sizing.h"

namespace peregrine {

namespace {

namespace pc = peregrine::cuda;

// How many bytes of its allocation follow a mapped pointer (the driver's cuMemGetAddressRange,
// from the driver the runtime loaded: the binary links no libcuda).
Result<uint64_t> MappedBytes(const void* p) {
  static PFN_cuMemGetAddressRange_v3020 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return PFN_cuMemGetAddressRange_v3020{nullptr};
    }
    return reinterpret_cast<PFN_cuMemGetAddressRange_v3020>(f);
  }();
  if (fn == nullptr) return Unavailable("the CUDA driver cannot say how large a CUDA IPC mapping is");
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto at = reinterpret_cast<CUdeviceptr>(p);
  if (fn(&base, &size, at) != CUDA_SUCCESS || at < base || at - base > size)
    return Unavailable("the CUDA driver does not know the CUDA IPC mapping");
  return static_cast<uint64_t>(size - (at - base));
}

size_t TotalBytes(const std::vector<DeviceRegion>& regions) {
  size_t n = 0;
  for (const DeviceRegion& r : regions) n += r.bytes;
  return n;
}

}  // namespace

Status CudaModelRunner::PageRegions(int32_t slot, std::span<const int32_t> blocks,
                                    std::vector<std::vector<DeviceRegion>>* where) const {
  DeviceModel& model = executor_->model();
  where->push_back(model.SlotRegions(slot));
  if (where->front().empty()) return Unimplemented("this model cannot export or import its KV");
  for (int32_t b : blocks) {
    if (b < 0 || b >= executor_->kv_capacity().num_blocks) return InvalidArgument("block id outside the pools");
    where->push_back(model.BlockRegions(b));
  }
  return Status::Ok();
}

Status CudaModelRunner::CopyKvPages(std::span<const pc::KvCopyRange> ranges, size_t num_pages, cudaStream_t stream,
                                    std::vector<uint64_t>* checksums) {
  std::vector<kernels::KvCopySegment> segments;
  PG_RETURN_IF_ERROR(pc::PlanKvCopy(ranges, &segments));
  // The buffers are reused only after the previous copy was waited for (below).
  const size_t segment_bytes = segments.size() * sizeof(kernels::KvCopySegment);
  if (kv_segments_d_.bytes() < segment_bytes) {
    kv_segments_d_.Reset();
    PG_ASSIGN_OR_RETURN(kv_segments_d_, executor_->allocator().Allocate(std::max<size_t>(segment_bytes, 4096)));
  }
  if (kv_checksums_d_.bytes() < num_pages * 8) {
    kv_checksums_d_.Reset();
    PG_ASSIGN_OR_RETURN(kv_checksums_d_, executor_->allocator().Allocate(std::max<size_t>(num_pages * 8, 4096)));
  }
  // Pageable host memory: the copies stage it before they return.
  if (segment_bytes > 0)
    PG_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(kv_segments_d_.data(), segments.data(), segment_bytes, cudaMemcpyHostToDevice, stream));
  PG_RETURN_IF_ERROR(pc::KvCopy(kv_segments_d_.as<const kernels::KvCopySegment>(), static_cast<int64_t>(segments.size()),
                                kv_checksums_d_.as<uint64_t>(), static_cast<int64_t>(num_pages), stream));
  checksums->assign(num_pages, 0);
  PG_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(checksums->data(), kv_checksums_d_.data(), num_pages * 8, cudaMemcpyDeviceToHost, stream));
  PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  return Status::Ok();
}

Status CudaModelRunner::ExportKvToStaging(const std::vector<std::vector<DeviceRegion>>& where, TransferredKv* kv) {
  uint64_t total = 0;
  for (const auto& page : where) total += TotalBytes(page);
  if (kv_stream_.get() == nullptr) {
    PG_ASSIGN_OR_RETURN(kv_stream_, pc::Stream::Create());
  }
  PG_ASSIGN_OR_RETURN(const uint64_t slab, kv_staging_->Allocate(total));
  std::shared_ptr<KvStagingArena> arena = kv_staging_;
  auto pages = std::make_unique<DeviceKvPages>();
  pages->ipc_handle = arena->ipc_handle();
  pages->host = CudaIpcHostId();
  pages->arena_bytes = arena->bytes();
  std::vector<pc::KvCopyRange> ranges;
  uint64_t at = slab;
  for (size_t i = 0; i < where.size(); ++i) {
    pages->offsets.push_back(at);
    uint64_t in_page = 0;
    for (const DeviceRegion& r : where[i]) {
      ranges.push_back({r.data, arena->base() + at + in_page, r.bytes, in_page, i});
      in_page += r.bytes;
    }
    pages->sizes.push_back(in_page);
    at += in_page;
  }
  // Beside the executor's stream: the positions were computed by a collected step and
  // nothing newer writes this slot or these blocks (the request has finished).
  if (Status s = CopyKvPages(ranges, where.size(), kv_stream_.get(), &pages->checksums); !s.ok()) {
    arena->Free(slab);
    return s;
  }
  kv->pages.clear();
  kv->device = std::shared_ptr<const DeviceKvPages>(pages.release(), [arena, slab](const DeviceKvPages* p) {
    arena->Free(slab);
    delete p;
  });
  return Status::Ok();
}

Status CudaModelRunner::ExportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens, TransferredKv* kv) {
  const KvCapacity& c = executor_->kv_capacity();
  if (slot < 0 || slot >= c.num_slots) return InvalidArgument("KV slot outside the pools");
  if (slot_positions_[static_cast<size_t>(slot)] != num_tokens)
    return Internal("the slot does not hold " + std::to_string(num_tokens) + " positions to export");
  if (static_cast<int64_t>(blocks.size()) != c.layout.BlocksFor(num_tokens))
    return InvalidArgument("the block table does not match the exported positions");
  std::vector<std::vector<DeviceRegion>> where;
  PG_RETURN_IF_ERROR(PageRegions(slot, blocks, &where));
  kv->device = nullptr;
  kv->pages.clear();
  if (kv_staging_ != nullptr) {
    const Status s = ExportKvToStaging(where, kv);
    if (s.ok()) return s;
    // The arena is full of rooms not pulled yet (or the layout is not made of words).
    LogWarning("KV export through host memory: {}", s.message());
  }
  // A copy beside the executor's stream (the legacy stream: cudaMemcpy, synchronous for
  // pageable memory) reads the finished request's state whole.
  for (const std::vector<DeviceRegion>& regions : where) {
    std::vector<uint8_t>& page = kv->pages.emplace_back(TotalBytes(regions));
    size_t at = 0;
    for (const DeviceRegion& r : regions) {
      PG_CUDA_RETURN_IF_ERROR(cudaMemcpy(page.data() + at, r.data, r.bytes, cudaMemcpyDeviceToHost));
      at += r.bytes;
    }
  }
  return Status::Ok();
}

Status CudaModelRunner::ImportKvFromPeer(const std::vector<std::vector<DeviceRegion>>& where,
                                         const DeviceKvPages& pages) {
  if (pages.host != CudaIpcHostId())
    return Unavailable("the KV pages are in device memory on another host (CUDA IPC works on one host)");
  if (pages.offsets.size() != where.size() || pages.checksums.size() != where.size() ||
      pages.ipc_handle.size() != sizeof(cudaIpcMemHandle_t))
    return InvalidArgument("the device KV pages are described inconsistently");
  for (size_t i = 0; i < where.size(); ++i)
    if (pages.offsets[i] > pages.arena_bytes || pages.sizes[i] > pages.arena_bytes - pages.offsets[i])
      return InvalidArgument("a device KV page lies outside its arena");
  const std::string key(pages.ipc_handle.begin(), pages.ipc_handle.end());
  auto it = kv_peers_.find(key);
  if (it == kv_peers_.end()) {
    // A prefill server that restarted left its old arena mapped here: past a few peers the
    // least recently used mapping goes (imports are synchronous: nothing still reads it).
    if (kv_peers_.size() >= kMaxKvPeers) {
      auto oldest = kv_peers_.begin();
      for (auto p = kv_peers_.begin(); p != kv_peers_.end(); ++p)
        if (p->second.last_use < oldest->second.last_use) oldest = p;
      (void)cudaIpcCloseMemHandle(oldest->second.base);
      kv_peers_.erase(oldest);
    }
    cudaIpcMemHandle_t h;
    std::memcpy(&h, pages.ipc_handle.data(), sizeof h);
    void* p = nullptr;
    if (const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the next launch must not see it
      return Unavailable(std::string("cannot open the prefill server's CUDA IPC handle: ") + cudaGetErrorString(e));
    }
    Result<uint64_t> mapped = MappedBytes(p);
    if (!mapped.ok()) {
      (void)cudaIpcCloseMemHandle(p);
      return mapped.status();
    }
    it = kv_peers_.emplace(key, KvPeer{p, *mapped, 0}).first;
  }
  it->second.last_use = ++kv_peer_uses_;
  // The meta's offsets were checked against the arena size it names; the mapping is the truth.
  for (size_t i = 0; i < where.size(); ++i)
    if (pages.offsets[i] > it->second.bytes || pages.sizes[i] > it->second.bytes - pages.offsets[i])
      return InvalidArgument("a device KV page lies outside the prefill server's arena");
  const auto* peer = static_cast<const uint8_t*>(it->second.base);
  std::vector<pc::KvCopyRange> ranges;
  for (size_t i = 0; i < where.size(); ++i) {
    uint64_t in_page = 0;
    for (const DeviceRegion& r : where[i]) {
      ranges.push_back({peer + pages.offsets[i] + in_page, r.data, r.bytes, in_page, i});
      in_page += r.bytes;
    }
  }
  // On the executor's stream: a launched step of the slot's previous request may still write
  // its state; the next step of this one reads it after the copy. The checksums are of what
  // was written, so pages the exporter reused meanwhile are refused.
  std::vector<uint64_t> sums;
  if (Status s = CopyKvPages(ranges, where.size(), executor_->stream(), &sums); !s.ok()) {
    (void)cudaGetLastError();  // a launch error that is not sticky must not fail the next step
    return s;
  }
  for (size_t i = 0; i < where.size(); ++i)
    if (sums[i] != pages.checksums[i])
      return DataLoss("KV page " + std::to_string(i) + " read over CUDA IPC does not match its checksum");
  return Status::Ok();
}

Status CudaModelRunner::ImportKv(int32_t slot, std::span<const int32_t> blocks, int64_t num_tokens,
                                 const TransferredKv& kv) {
  const KvCapacity& c = executor_->kv_capacity();
  if (slot < 0 || slot >= c.num_slots) return InvalidArgument("KV slot outside the pools");
  if (num_tokens <= 0 || num_tokens >= max_context()) return InvalidArgument("imported positions outside the context");
  if (static_cast<int64_t>(blocks.size()) != c.layout.BlocksFor(num_tokens))
    return InvalidArgument("the block table does not match the imported positions");
  if (kv.num_pages() != blocks.size() + 1)
    return InvalidArgument("expected " + std::to_string(blocks.size() + 1) + " KV pages, got " +
                           std::to_string(kv.num_pages()));
  std::vector<std::vector<DeviceRegion>> where;
  PG_RETURN_IF_ERROR(PageRegions(slot, blocks, &where));
  for (size_t i = 0; i < where.size(); ++i) {
    const uint64_t size = kv.device != nullptr ? kv.device->sizes[i] : kv.pages[i].size();
    if (size != TotalBytes(where[i])) return InvalidArgument("a KV page does not fit this layout");
  }
  slot_positions_[static_cast<size_t>(slot)] = -1;
  if (kv.device != nullptr) {
    PG_RETURN_IF_ERROR(ImportKvFromPeer(where, *kv.device));
  } else {
    // On the executor's stream (as above).
    const cudaStream_t stream = executor_->stream();
    for (size_t i = 0; i < where.size(); ++i) {
      size_t at = 0;
      for (const DeviceRegion& r : where[i]) {
        PG_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(r.data, kv.pages[i].data() + at, r.bytes, cudaMemcpyHostToDevice, stream));
        at += r.bytes;
      }
    }
    // The pages are the caller's: they must have been read before this returns.
    PG_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  }
  slot_positions_[static_cast<size_t>(slot)] = num_tokens;
  return Status::Ok();
}

void CudaModelRunner::CloseKvPeers() {
  for (const auto& [handle, peer] : kv_peers_) (void)cudaIpcCloseMemHandle(peer.base);
  kv_peers_.clear();
}

std::string CudaModelRunner::kv_fingerprint() const {
  if (executor_->model().SlotRegions(0).empty()) return {};
  const char* format = executor_->options().kv_cache_fp8 ? "cuda-bf16-fp8entries/" : "cuda-bf16/";
  return KvFingerprint(format + executor_->config().model_type + "/vocab=" +
                           std::to_string(executor_->config().vocab_size),
                       executor_->kv_capacity().layout);
}

}  // namespace peregrine
