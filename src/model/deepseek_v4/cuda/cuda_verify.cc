// Speculative verify of draft trees on the device (docs/decisions/0010-device-draft-trees.md):
// a verify step leaves every node's window row in the step's rows and its compressor rows and
// completed entries in the staging rows (../step_plan.h); after acceptance one batched copy
// moves the kept root path's rows into the slot, as if only those tokens had run.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/ops/kv_copy.h"
#include "model/deepseek_v4/cuda/cuda_model_impl.h"

namespace peregrine::deepseek_v4::cuda {

Status CudaModel::EnqueueCommit(std::span<const TreeCommit> commits, cudaStream_t stream) {
  return impl_->EnqueueCommit(commits, stream);
}

Status CudaModel::Impl::EnqueueCommit(std::span<const TreeCommit> commits, cudaStream_t s) {
  if (commits.empty()) return Status::Ok();
  if (stages.empty()) return InvalidArgument("CUDA model: built without speculative verify (max_verify_rows 0)");
  const KvGeometry& g = geometry;
  const int64_t w = g.window, hd = g.head_dim, id = g.index_dim;
  const int64_t scratch = static_cast<int64_t>(pools.num_slots) * w;
  std::vector<uint8_t> done(trees.size(), 0);
  std::vector<kernels::KvCopySegment> segments;
  auto add = [&](const void* src, void* dst, int64_t bytes) {
    kernels::KvCopySegment seg;
    seg.src = src;
    seg.dst = dst;
    seg.words = static_cast<uint64_t>(bytes / 8);
    segments.push_back(seg);
  };
  auto at = [](const Tensor& t, int64_t byte_offset) { return static_cast<char*>(t.data) + byte_offset; };
  for (const TreeCommit& commit : commits) {
    size_t k = 0;
    while (k < trees.size() && trees[k].slot != commit.slot) ++k;
    if (k == trees.size() || done[k])
      return InvalidArgument("CUDA model: slot " + std::to_string(commit.slot) + " verified no draft tree to commit");
    const VerifiedTree& tree = trees[k];
    const auto n = static_cast<int64_t>(tree.parents.size());
    const auto kept = static_cast<int64_t>(commit.nodes.size());
    if (kept < 1 || commit.nodes[0] != 0)
      return InvalidArgument("CUDA model: a commit keeps the tree's root and a path below it");
    for (int64_t d = 1; d < kept; ++d) {
      const int32_t node = commit.nodes[static_cast<size_t>(d)];
      if (node <= 0 || node >= n || tree.parents[static_cast<size_t>(node)] != commit.nodes[static_cast<size_t>(d - 1)])
        return InvalidArgument("CUDA model: a commit's nodes must be a root path of the verified tree");
    }
    done[k] = 1;
    // Node at depth d of the path: position first_position + d.
    for (int64_t d = 0; d < kept; ++d) {
      const int64_t node = commit.nodes[static_cast<size_t>(d)];
      const int64_t pos = tree.first_position + d;
      const int64_t stage = tree.first_stage_row + node;
      // Its window row, when it is among the last W kept.
      if (d >= kept - w) {
        const int64_t src_row = scratch + tree.first_row + node;
        const int64_t dst_row = static_cast<int64_t>(tree.slot) * w + pos % w;
        for (const LayerKv& l : kv) add(at(l.window, src_row * hd * 2), at(l.window, dst_row * hd * 2), hd * 2);
      }
      // Its compressor ring rows, and the entries it completed.
      for (size_t i = 0; i < g.layers.size(); ++i) {
        const KvGeometry::Layer& layer = g.layers[i];
        if (layer.ratio == 0) continue;
        const bool is_csa = layer.csa_index >= 0;
        const int64_t coff = is_csa ? 2 : 1, ratio = layer.ratio;
        const LayerStage& st = stages[i];
        const LayerKv& l = kv[i];
        // The ring holds the last coff * ratio positions: an earlier kept node's row would
        // land on the same ring row as a later one's (the copies run in no order).
        if (d >= kept - coff * ratio) {
          const int64_t r = coff == 2 ? ((pos / ratio) % 2) * ratio + pos % ratio : pos % ratio;
          const int64_t ring = static_cast<int64_t>(tree.slot) * coff * ratio + r;
          const int64_t width = coff * hd;
          add(at(st.kv.view, stage * width * 4), at(l.kv_ring, ring * width * 4), width * 4);
          add(at(st.gate.view, stage * width * 4), at(l.gate_ring, ring * width * 4), width * 4);
          if (is_csa) {
            add(at(st.index_kv.view, stage * 2 * id * 4), at(l.index_kv_ring, ring * 2 * id * 4), 2 * id * 4);
            add(at(st.index_gate.view, stage * 2 * id * 4), at(l.index_gate_ring, ring * 2 * id * 4), 2 * id * 4);
          }
        }
        if ((pos + 1) % ratio != 0) continue;
        const int64_t entry = (pos + 1) / ratio - 1;
        const int64_t page_size = l.cache.shape[1];
        const auto page = static_cast<size_t>(entry / page_size);
        if (page >= tree.blocks.size() || tree.blocks[page] < 0) return Internal("CUDA model: a kept entry has no block");
        const int64_t row = static_cast<int64_t>(tree.blocks[page]) * page_size + entry % page_size;
        const int64_t bytes = g.entry_bytes();  // bf16 or FP8 rows, as the pools hold them
        add(at(st.entries.view, stage * bytes), at(l.cache, row * bytes), bytes);
        if (is_csa) add(at(st.index_keys.view, stage * id * 2), at(l.index_keys, row * id * 2), id * 2);
      }
    }
  }
  for (size_t k = 0; k < trees.size(); ++k)
    if (!done[k]) return InvalidArgument("CUDA model: every verified tree needs its commit");
  trees.clear();
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
