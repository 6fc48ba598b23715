// Speculative decoding on the CPU model: keeping one path of a verified draft tree
// (CommitTree), the MTP drafter (Draft) and DSpark's block drafter (BlockDraft). model.h
// states the contracts; attention.cc stages a tree's state.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "backend/cpu/cpu_ops.h"
#include "model/deepseek_v4/compressor.h"
#include "model/deepseek_v4/layers.h"
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
                         completes ? kv.Entry(l, blocks, e) : nullptr, kv_fp8_rope_dim_);
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

// A draft input's shape and ids (both drafters' contract, model.h).
Status CheckDraftInput(const DraftInput& in, int32_t num_slots, int64_t rows_in_step, int64_t vocab) {
  if (in.slot < 0 || in.slot >= num_slots) return InvalidArgument("KV slot outside the store");
  if (in.tokens.size() != in.rows.size() && in.tokens.size() != in.rows.size() + 1)
    return InvalidArgument("a draft input needs one token per row, and maybe the next");
  if (in.num_steps > 0 && in.tokens.size() != in.rows.size() + 1)
    return InvalidArgument("drafting needs the token after the last row");
  for (int32_t r : in.rows)
    if (r < 0 || r >= rows_in_step) return InvalidArgument("a draft row outside the last step's hidden states");
  for (int32_t t : in.tokens)
    if (t < 0 || t >= vocab) return InvalidArgument("token id out of range: " + std::to_string(t));
  return Status::Ok();
}

// Window rows a draft overwrites (drafted positions are not committed), put back after it in
// reverse order of saving, so a row saved twice ends as it was first.
class SavedWindowRows {
 public:
  SavedWindowRows(CpuKvStore& store, int64_t window, int64_t head_dim) : store_(store), w_(window), hd_(head_dim) {}
  void Save(int32_t slot, int64_t layer, int64_t position) {
    const float* ring = Row(slot, layer, position);
    rows_.push_back({slot, layer, position, std::vector<float>(ring, ring + hd_)});
  }
  void Restore() {
    for (auto it = rows_.rbegin(); it != rows_.rend(); ++it)
      std::copy(it->row.begin(), it->row.end(), Row(it->slot, it->layer, it->position));
    rows_.clear();
  }

 private:
  float* Row(int32_t slot, int64_t layer, int64_t position) {
    return store_.Window(layer, slot) + (position % w_) * hd_;
  }
  struct Saved {
    int32_t slot;
    int64_t layer, position;
    std::vector<float> row;
  };
  CpuKvStore& store_;
  int64_t w_, hd_;
  std::vector<Saved> rows_;
};

}  // namespace

Status Model::Draft(HostKvPools& pools, std::span<const DraftInput> inputs,
                    std::vector<std::vector<speculative::DepthCandidates>>* out) {
  auto* kv = dynamic_cast<CpuKvStore*>(&pools);
  if (kv == nullptr) return Internal("DeepSeek-V4 on the CPU runs on its own KV pools");
  if (has_block_drafter()) return BlockDraft(*kv, inputs, out);
  if (weights_.mtp.empty()) return Unimplemented("the checkpoint has no MTP layer to draft with");
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
    PG_RETURN_IF_ERROR(CheckDraftInput(in, kv->num_slots(), rows_in_step, c.vocab_size));
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
  SavedWindowRows saved(store, c.sliding_window, c.head_dim);
  for (int32_t k = 1; k < steps; ++k) {
    segments.clear();
    h.clear();
    next.clear();
    std::vector<size_t> who;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].num_steps <= k || out->at(i).size() != static_cast<size_t>(k)) continue;
      const CpuKvStore::DrafterSlot& ds = kv->Drafter(inputs[i].slot);
      const int64_t pos = ds.next + k - 1;
      saved.Save(inputs[i].slot, 0, pos);
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
  saved.Restore();
  return Status::Ok();
}

Status Model::BlockStages(std::span<const Segment> segments, std::span<const int32_t> ids, const float* x, int64_t n,
                          std::vector<float>* streams) {
  const ModelConfig& c = config_;
  const int64_t d = c.hidden_size, hc = c.hc_mult;
  streams->resize(static_cast<size_t>(n * hc * d));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < hc; ++j) std::copy_n(x + t * d, d, streams->data() + (t * hc + j) * d);
  const ModelConfig dc = BlockDrafterConfig(c);
  const std::vector<LayerWeights>& stages = weights_.block_drafter->stages;
  for (size_t s = 0; s < stages.size(); ++s)
    PG_RETURN_IF_ERROR(RunLayer(dc, stages[s], static_cast<int64_t>(s), segments, ids, streams->data(), n));
  return Status::Ok();
}

Status Model::BlockDraft(CpuKvStore& kv, std::span<const DraftInput> inputs,
                         std::vector<std::vector<speculative::DepthCandidates>>* out) {
  const ModelConfig& c = config_;
  const BlockDrafterWeights& bw = *weights_.block_drafter;
  const int64_t d = c.hidden_size, vocab = c.vocab_size;
  const auto num_taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  const int64_t rank = c.dspark_markov_rank, block = c.dspark_block_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const ModelConfig dc = BlockDrafterConfig(c);
  CpuKvStore& store = kv.DrafterStore(KvGeometry::For(dc, kv.geometry().block_tokens, KvElementSizes{}));
  const auto rows_in_step = static_cast<int64_t>(last_taps_.size()) / (num_taps * d);

  // The committed rows: main_x from their taps, through the stages on each slot's windows.
  std::vector<Segment> segments;
  std::vector<int32_t> ids;
  std::vector<float> taps;  // [n, taps * D]
  for (const DraftInput& in : inputs) PG_RETURN_IF_ERROR(CheckDraftInput(in, kv.num_slots(), rows_in_step, vocab));
  for (const DraftInput& in : inputs) {
    CpuKvStore::DrafterSlot& ds = kv.Drafter(in.slot);
    if (in.restart || ds.next != in.first_position) {
      ds = {};
      ds.floor = ds.next = in.first_position;
    }
    if (in.rows.empty()) continue;
    Segment seg{&store, in.slot, {}, {}, ds.next, static_cast<int64_t>(ids.size()),
                static_cast<int64_t>(in.rows.size())};
    seg.window_floor = ds.floor;
    segments.push_back(seg);
    for (size_t r = 0; r < in.rows.size(); ++r) {
      ids.push_back(in.tokens[r]);
      const float* tap = last_taps_.data() + static_cast<int64_t>(in.rows[r]) * num_taps * d;
      taps.insert(taps.end(), tap, tap + num_taps * d);
    }
    ds.next += static_cast<int64_t>(in.rows.size());
  }
  std::vector<float> streams;
  if (!ids.empty()) {
    const auto n = static_cast<int64_t>(ids.size());
    std::vector<float> main_x(static_cast<size_t>(n * d));
    cpu::Linear(pool_, taps.data(), bw.main_proj.f32(), main_x.data(), n, num_taps * d, d);
    cpu::RmsNorm(main_x.data(), bw.main_norm.f32(), main_x.data(), n, d, eps);
    PG_RETURN_IF_ERROR(BlockStages(segments, ids, main_x.data(), n, &streams));
  }

  // The blocks: [token after the last row, noise...] after each slot's committed rows; what
  // they write into the windows is put back afterwards.
  segments.clear();
  ids.clear();
  SavedWindowRows saved(store, c.sliding_window, c.head_dim);
  std::vector<int64_t> depths(inputs.size(), 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DraftInput& in = inputs[i];
    out->emplace_back();
    if (in.num_steps <= 0) continue;
    depths[i] = std::min<int64_t>(in.num_steps, block);
    const CpuKvStore::DrafterSlot& ds = kv.Drafter(in.slot);
    Segment seg{&store, in.slot, {}, {}, ds.next, static_cast<int64_t>(ids.size()), depths[i]};
    seg.window_floor = ds.floor;
    segments.push_back(seg);
    ids.push_back(in.tokens.back());
    for (int64_t k = 1; k < depths[i]; ++k) ids.push_back(static_cast<int32_t>(c.dspark_noise_token_id));
    for (int64_t s = 0; s < dc.num_layers; ++s)
      for (int64_t k = 0; k < depths[i]; ++k) saved.Save(in.slot, s, ds.next + k);
  }
  if (ids.empty()) return Status::Ok();
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<float> x(static_cast<size_t>(n * d));
  for (int64_t t = 0; t < n; ++t)
    std::copy_n(weights_.embed.f32() + static_cast<int64_t>(ids[static_cast<size_t>(t)]) * d, d, x.data() + t * d);
  PG_RETURN_IF_ERROR(BlockStages(segments, ids, x.data(), n, &streams));
  saved.Restore();
  std::vector<float> y(static_cast<size_t>(n * d)), logits;
  HyperConnectionHead(c, bw.hc_head, streams.data(), n, y.data());
  cpu::RmsNorm(y.data(), bw.norm.f32(), y.data(), n, d, eps);
  PG_RETURN_IF_ERROR(Head(y.data(), n, &logits));

  // Left to right per block: the Markov term of the top token before each position.
  std::vector<float> markov(static_cast<size_t>(vocab));
  const float* conf = bw.confidence.f32();
  for (size_t i = 0, row = 0; i < inputs.size(); ++i) {
    int32_t before = depths[i] > 0 ? inputs[i].tokens.back() : 0;
    for (int64_t k = 0; k < depths[i]; ++k, ++row) {
      const float* r = bw.markov_w1.f32() + static_cast<int64_t>(before) * rank;
      cpu::Linear(pool_, r, bw.markov_w2.f32(), markov.data(), 1, rank, vocab);
      std::span<float> l(logits.data() + row * static_cast<size_t>(vocab), static_cast<size_t>(vocab));
      for (int64_t v = 0; v < vocab; ++v) l[static_cast<size_t>(v)] += markov[static_cast<size_t>(v)];
      speculative::DepthCandidates cand = TopCandidates(l, inputs[i].top_k);
      double z = 0.0;
      for (int64_t j = 0; j < d; ++j) z += static_cast<double>(conf[j]) * y[row * static_cast<size_t>(d) + static_cast<size_t>(j)];
      for (int64_t j = 0; j < rank; ++j) z += static_cast<double>(conf[d + j]) * r[j];
      cand.confidence = static_cast<float>(1.0 / (1.0 + std::exp(-z)));
      before = cand.tokens.front();
      out->at(i).push_back(std::move(cand));
    }
  }
  return Status::Ok();
}

}  // namespace peregrine::deepseek_v4
