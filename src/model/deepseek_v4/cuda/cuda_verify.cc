// Speculative verify of draft chains on the device (decision 0007): after a step whose chains
// ran with staged window rows and saved compressor rows (../step_plan.h), keep each chain's
// accepted prefix and undo the rest with one batched copy.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/kv_copy.h"
#include "model/deepseek_v4/cuda/cuda_model_impl.h"

namespace peregrine::deepseek_v4::cuda {

Status CudaModel::EnqueueCommit(std::span<const ChainCommit> commits, cudaStream_t stream) {
  return impl_->EnqueueCommit(commits, stream);
}

Status CudaModel::Impl::EnqueueCommit(std::span<const ChainCommit> commits, cudaStream_t s) {
  if (commits.empty()) return Status::Ok();
  if (saves.empty()) return InvalidArgument("CUDA model: built without speculative verify (max_verify_rows 0)");
  const KvGeometry& g = geometry;
  const int64_t w = g.window, hd = g.head_dim, id = g.index_dim;
  const int64_t scratch = static_cast<int64_t>(pools.num_slots) * w;
  std::vector<uint8_t> done(chains.size(), 0);
  std::vector<kernels::KvCopySegment> segments;
  auto add = [&](const void* src, void* dst, int64_t bytes) {
    kernels::KvCopySegment seg;
    seg.src = src;
    seg.dst = dst;
    seg.words = static_cast<uint64_t>(bytes / 8);
    segments.push_back(seg);
  };
  auto at = [](const Tensor& t, int64_t byte_offset) { return static_cast<char*>(t.data) + byte_offset; };
  for (const ChainCommit& commit : commits) {
    size_t k = 0;
    while (k < chains.size() && chains[k].slot != commit.slot) ++k;
    if (k == chains.size() || done[k])
      return InvalidArgument("CUDA model: slot " + std::to_string(commit.slot) + " verified no draft chain to commit");
    const VerifiedChain& chain = chains[k];
    if (commit.kept < 1 || commit.kept > chain.num_tokens)
      return InvalidArgument("CUDA model: a commit keeps 1 to " + std::to_string(chain.num_tokens) + " tokens");
    done[k] = 1;
    // Kept tokens: their window rows move from the step's rows into the ring (the last W).
    for (int64_t t = std::max<int64_t>(0, commit.kept - w); t < commit.kept; ++t) {
      const int64_t pos = chain.first_position + t;
      const int64_t src_row = scratch + chain.first_row + t;
      const int64_t dst_row = static_cast<int64_t>(chain.slot) * w + pos % w;
      for (const LayerKv& l : kv) add(at(l.window, src_row * hd * 2), at(l.window, dst_row * hd * 2), hd * 2);
    }
    // Rejected tokens: each ring row they overwrote gets back what the first of them found
    // there (a later one saved an already overwritten row).
    for (size_t i = 0; i < g.layers.size(); ++i) {
      const KvGeometry::Layer& layer = g.layers[i];
      if (layer.ratio == 0) continue;
      const bool is_csa = layer.csa_index >= 0;
      const int64_t coff = is_csa ? 2 : 1, ratio = layer.ratio;
      const int64_t ring_rows = coff * ratio;
      std::vector<uint8_t> restored(static_cast<size_t>(ring_rows), 0);
      for (int64_t t = commit.kept; t < chain.num_tokens; ++t) {
        const int64_t pos = chain.first_position + t;
        const int64_t r = coff == 2 ? ((pos / ratio) % 2) * ratio + pos % ratio : pos % ratio;
        if (restored[static_cast<size_t>(r)]) continue;
        restored[static_cast<size_t>(r)] = 1;
        const int64_t save = chain.first_save_row + t;
        const int64_t ring = static_cast<int64_t>(chain.slot) * ring_rows + r;
        const LayerSave& sv = saves[i];
        const LayerKv& l = kv[i];
        const int64_t width = coff * hd;
        add(at(sv.kv.view, save * width * 4), at(l.kv_ring, ring * width * 4), width * 4);
        add(at(sv.gate.view, save * width * 4), at(l.gate_ring, ring * width * 4), width * 4);
        if (is_csa) {
          add(at(sv.index_kv.view, save * 2 * id * 4), at(l.index_kv_ring, ring * 2 * id * 4), 2 * id * 4);
          add(at(sv.index_gate.view, save * 2 * id * 4), at(l.index_gate_ring, ring * 2 * id * 4), 2 * id * 4);
        }
      }
    }
  }
  for (size_t k = 0; k < chains.size(); ++k)
    if (!done[k]) return InvalidArgument("CUDA model: every verified chain needs its commit");
  chains.clear();
  const auto capacity = static_cast<size_t>(commit_segments.view.shape[0]);
  if (segments.size() > capacity) return Internal("CUDA model: the commit's copies exceed their buffer");
  if (segments.empty()) return Status::Ok();
  // From pageable memory: the copy has left `segments` when the call returns.
  PG_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(commit_segments.view.data, segments.data(),
                                          segments.size() * sizeof(kernels::KvCopySegment), cudaMemcpyHostToDevice, s));
  return pc::KvCopy(static_cast<const kernels::KvCopySegment*>(commit_segments.view.data),
                    static_cast<int64_t>(segments.size()), static_cast<uint64_t*>(commit_checksum.view.data), 1, s);
}

}  // namespace peregrine::deepseek_v4::cuda
