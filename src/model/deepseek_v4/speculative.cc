// Speculative decoding on the CPU model: keeping one path of a verified draft tree
// (CommitTree) and the MTP drafter (Draft). model.h states the contracts; attention.cc
// stages a tree's state.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4 {

Status Model::CommitTree(CpuKvStore& kv, int32_t slot, std::span<const int32_t> blocks,
                         std::span<const int32_t> path) {
  if (slot < 0 || slot >= kv.num_slots()) return InvalidArgument("KV slot outside the store");
  CpuKvStore::StagedTree& st = kv.Staged(slot);
  if (st.first_position < 0) return InvalidArgument("no draft tree is staged in this slot");
  const auto n = static_cast<int64_t>(st.parents.size());
  if (path.empty() || path[0] != 0) return InvalidArgument("a kept path starts at the root");
  for (size_t k = 1; k < path.size(); ++k)
    if (path[k] <= 0 || path[k] >= n || st.parents[static_cast<size_t>(path[k])] != path[k - 1])
      return InvalidArgument("a kept path must follow the tree from parent to child");
  const int64_t first = st.first_position;
  const auto len = static_cast<int64_t>(path.size());
  const KvGeometry& g = kv.geometry();
  if (g.Layout().BlocksFor(first + len) > static_cast<int64_t>(blocks.size()))
    return InvalidArgument("the block table does not cover the kept path");
  const ModelConfig& c = config_;
  const int64_t hd = c.head_dim, id = c.index_head_dim, w = c.sliding_window;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const int64_t first_boundary = first / g.block_tokens + 1;
  // Replays the plain walk's writes along the path (attention.cc), layer by layer.
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const AttentionWeights& aw = weights_.layers[static_cast<size_t>(l)].attn;
    const CpuKvStore::StagedLayer& sl = st.layers[static_cast<size_t>(l)];
    const bool sliding = c.layer_types[static_cast<size_t>(l)] == AttentionType::kSliding;
    const RopeTable& rope = sliding ? rope_main_ : rope_compress_;
    float* ring = kv.Window(l, slot);
    CompressorRings cr, ir;
    if (aw.compressor) cr = {kv.CompressorKv(l, slot), kv.CompressorGate(l, slot), aw.compressor->ratio, hd, aw.compressor->coff};
    if (aw.indexer) ir = {kv.IndexerKv(l, slot), kv.IndexerGate(l, slot), aw.indexer->compressor.ratio, id, aw.indexer->compressor.coff};
    for (int64_t k = 0; k < len; ++k) {
      const int64_t node = path[static_cast<size_t>(k)];
      const int64_t pos = first + k;
      std::copy_n(sl.kv.data() + node * hd, hd, ring + (pos % w) * hd);
      if (aw.compressor) {
        const int64_t ratio = aw.compressor->ratio, cw = aw.compressor->coff * hd;
        const bool completes = (pos + 1) % ratio == 0;
        const int64_t e = (pos + 1) / ratio - 1;
        CompressorAppend(*aw.compressor, cr, rope, eps, pos, sl.ckv.data() + node * cw, sl.cgate.data() + node * cw,
                         completes ? kv.Entry(l, blocks, e) : nullptr);
        if (aw.indexer)
          CompressorAppend(aw.indexer->compressor, ir, rope, eps, pos, sl.ikv.data() + node * 2 * id,
                           sl.igate.data() + node * 2 * id, completes ? kv.IndexKey(l, blocks, e) : nullptr);
      }
      if ((pos + 1) % g.block_tokens == 0) {
        const int64_t i = (pos + 1) / g.block_tokens - first_boundary;
        if (i >= 0 && i < static_cast<int64_t>(st.snapshots.size()) && st.snapshots[static_cast<size_t>(i)] >= 0)
          kv.WriteSnapshot(l, slot, st.snapshots[static_cast<size_t>(i)], pos + 1);
      }
    }
  }
  st.first_position = -1;
  return Status::Ok();
}

Status Model::CommitTree(HostKvPools& kv, int32_t slot, std::span<const int32_t> blocks,
                         std::span<const int32_t> path) {
  auto* store = dynamic_cast<CpuKvStore*>(&kv);
  if (store == nullptr) return Internal("DeepSeek-V4 on the CPU runs on its own KV pools");
  return CommitTree(*store, slot, blocks, path);
}

namespace {

// The top_k tokens of a logits row by logprob, ties to the lower id.
speculative::DepthCandidates TopCandidates(std::span<const float> logits, int32_t top_k) {
  float mx = -std::numeric_limits<float>::infinity();
  for (float v : logits) mx = std::fmax(mx, v);
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - mx);
  const float log_z = mx + static_cast<float>(std::log(sum));
  std::vector<int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  const auto keep = std::min<size_t>(static_cast<size_t>(std::max(top_k, 1)), order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(),
                    [&](int32_t a, int32_t b) {
                      const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
                      return la != lb ? la > lb : a < b;
                    });
  speculative::DepthCandidates out;
  for (size_t i = 0; i < keep; ++i) {
    out.tokens.push_back(order[i]);
    out.logprobs.push_back(logits[static_cast<size_t>(order[i])] - log_z);
  }
  return out;
}

}  // namespace

Status Model::Draft(HostKvPools& pools, std::span<const DraftInput> inputs,
                    std::vector<std::vector<speculative::DepthCandidates>>* out) {
  if (weights_.mtp.empty()) return Unimplemented("the checkpoint has no MTP layer to draft with");
  auto* kv = dynamic_cast<CpuKvStore*>(&pools);
  if (kv == nullptr) return Internal("DeepSeek-V4 on the CPU runs on its own KV pools");
  const ModelConfig& c = config_;
  const int64_t hcd = c.hc_mult * c.hidden_size;
  const ModelConfig mc = MtpLayerConfig(c);
  CpuKvStore& store = kv->DrafterStore(KvGeometry::For(mc, kv->geometry().block_tokens, KvElementSizes{}));
  const auto rows_in_step = static_cast<int64_t>(last_streams_.size()) / hcd;

  // Extend every slot's state over its committed pairs, in one run of the layer.
  std::vector<Segment> segments;
  std::vector<const float*> h;
  std::vector<int32_t> next;
  std::vector<uint8_t> wanted;
  std::vector<int64_t> last_pair(inputs.size(), -1);  // the pair whose logits give step 1
  std::vector<int64_t> num_pairs(inputs.size(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    if (in.slot < 0 || in.slot >= kv->num_slots()) return InvalidArgument("KV slot outside the store");
    if (in.tokens.size() != in.rows.size() && in.tokens.size() != in.rows.size() + 1)
      return InvalidArgument("a draft input needs one token per row, and maybe the next");
    if (in.num_steps > 0 && in.tokens.size() != in.rows.size() + 1)
      return InvalidArgument("drafting needs the token after the last row");
    for (int32_t r : in.rows)
      if (r < 0 || r >= rows_in_step) return InvalidArgument("a draft row outside the last step's hidden states");
    for (int32_t t : in.tokens)
      if (t < 0 || t >= c.vocab_size) return InvalidArgument("token id out of range: " + std::to_string(t));
    CpuKvStore::DrafterSlot& ds = kv->Drafter(in.slot);
    const bool continues = ds.pending.empty() ? ds.next == in.first_position : ds.next + 1 == in.first_position;
    if (in.restart || !continues) {
      ds = {};
      ds.floor = ds.next = in.first_position;
    }
    const int64_t first_row = static_cast<int64_t>(h.size());
    const int64_t start = ds.next;
    if (!ds.pending.empty() && !in.tokens.empty()) {
      h.push_back(ds.pending.data());
      next.push_back(in.tokens[0]);
    }
    for (size_t r = 0; r < in.rows.size(); ++r) {
      const float* row = last_streams_.data() + static_cast<int64_t>(in.rows[r]) * hcd;
      if (r + 1 < in.tokens.size()) {
        h.push_back(row);
        next.push_back(in.tokens[r + 1]);
      }
    }
    const int64_t pairs = static_cast<int64_t>(h.size()) - first_row;
    num_pairs[i] = pairs;
    for (int64_t p = 0; p < pairs; ++p) wanted.push_back(in.num_steps > 0 && p == pairs - 1);
    if (in.num_steps > 0 && pairs > 0) last_pair[i] = static_cast<int64_t>(h.size()) - 1;
    if (pairs > 0) {
      Segment seg{&store, in.slot, {}, {}, start, first_row, pairs};
      seg.window_floor = ds.floor;
      segments.push_back(seg);
    }
  }
  std::vector<float> streams, logits;
  if (!h.empty()) PG_RETURN_IF_ERROR(MtpRun(segments, h, next, wanted, &streams, &logits));
  // Pending rows are copied only now: h may point into them.
  std::vector<std::vector<float>> chain_h(inputs.size());  // the streams the chain feeds back
  for (size_t i = 0, wanted_row = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    CpuKvStore::DrafterSlot& ds = kv->Drafter(in.slot);
    ds.next += num_pairs[i];
    if (in.tokens.size() == in.rows.size() && !in.rows.empty()) {
      const float* row = last_streams_.data() + static_cast<int64_t>(in.rows.back()) * hcd;
      ds.pending.assign(row, row + hcd);
    } else if (num_pairs[i] > 0) {
      ds.pending.clear();
    }
    (*out).emplace_back();
    if (last_pair[i] < 0) continue;
    chain_h[i].assign(streams.begin() + last_pair[i] * hcd, streams.begin() + (last_pair[i] + 1) * hcd);
    out->back().push_back(TopCandidates(
        std::span<const float>(logits).subspan(wanted_row * static_cast<size_t>(c.vocab_size),
                                               static_cast<size_t>(c.vocab_size)),
        in.top_k));
    ++wanted_row;
  }

  // The chain: step k + 1 runs at position next + k - 1 on the layer's output and top token
  // of step k; the window rows it writes are put back afterwards.
  int32_t steps = 0;
  for (const DraftInput& in : inputs) steps = std::max(steps, in.num_steps);
  const int64_t hd = c.head_dim, w = c.sliding_window;
  struct Saved {
    int32_t slot;
    int64_t position;
    std::vector<float> row;
  };
  std::vector<Saved> saved;
  for (int32_t k = 1; k < steps; ++k) {
    segments.clear();
    h.clear();
    next.clear();
    std::vector<size_t> who;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].num_steps <= k || out->at(i).size() != static_cast<size_t>(k)) continue;
      const CpuKvStore::DrafterSlot& ds = kv->Drafter(inputs[i].slot);
      const int64_t pos = ds.next + k - 1;
      const float* ring = store.Window(0, inputs[i].slot) + (pos % w) * hd;
      saved.push_back({inputs[i].slot, pos, std::vector<float>(ring, ring + hd)});
      Segment seg{&store, inputs[i].slot, {}, {}, pos, static_cast<int64_t>(h.size()), 1};
      seg.window_floor = ds.floor;
      segments.push_back(seg);
      h.push_back(chain_h[i].data());
      next.push_back(out->at(i).back().tokens.front());
      who.push_back(i);
    }
    if (who.empty()) break;
    const std::vector<uint8_t> all(who.size(), 1);
    PG_RETURN_IF_ERROR(MtpRun(segments, h, next, all, &streams, &logits));
    for (size_t j = 0; j < who.size(); ++j) {
      chain_h[who[j]].assign(streams.begin() + static_cast<int64_t>(j) * hcd,
                             streams.begin() + static_cast<int64_t>(j + 1) * hcd);
      out->at(who[j]).push_back(TopCandidates(
          std::span<const float>(logits).subspan(j * static_cast<size_t>(c.vocab_size), static_cast<size_t>(c.vocab_size)),
          inputs[who[j]].top_k));
    }
  }
  for (auto it = saved.rbegin(); it != saved.rend(); ++it)
    std::copy(it->row.begin(), it->row.end(), store.Window(0, it->slot) + (it->position % w) * hd);
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4
