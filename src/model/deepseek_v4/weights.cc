#include "model/deepseek_v4/weights.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <string>

#include "distributed/parallel_config.h"

namespace peregrine::deepseek_v4 {

namespace {

// Rows [begin, end) of a 2-D (or 1-D) tensor, sharing its storage.
HostTensor Rows(const HostTensor& t, int64_t begin, int64_t end) {
  HostTensor out = t;
  const int64_t row = t.view.ndim() > 1 ? t.view.stride(0) : 1;
  out.view.data = static_cast<char*>(t.view.data) + begin * row * static_cast<int64_t>(sizeof(float));
  out.view.shape = t.view.ndim() > 1 ? Shape{end - begin, t.view.shape[1]} : Shape{end - begin};
  return out;
}

// Columns [begin, end) of a 2-D f32 tensor, copied.
HostTensor Columns(const HostTensor& t, int64_t begin, int64_t end) {
  const int64_t rows = t.view.shape[0], cols = end - begin;
  auto storage = std::shared_ptr<float[]>(new float[static_cast<size_t>(rows * cols)]);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(storage.get() + r * cols, t.f32() + r * t.view.stride(0) + begin, static_cast<size_t>(cols) * sizeof(float));
  HostTensor out;
  out.view = Tensor::Contiguous(storage.get(), DType::kF32, {rows, cols});
  out.storage = std::static_pointer_cast<void>(std::shared_ptr<float>(storage, storage.get()));
  return out;
}

class Reader {
 public:
  explicit Reader(const Checkpoint& checkpoint) : checkpoint_(checkpoint) {}

  Status F32(const std::string& name, const Shape& shape, HostTensor* out) {
    auto r = checkpoint_.ReadF32(name, shape);
    if (!r.ok()) return r.status();
    *out = std::move(r).value();
    return Status::Ok();
  }
  // The first of `names` the checkpoint has (spellings differ between exports).
  Status F32Any(std::initializer_list<std::string> names, const Shape& shape, HostTensor* out) {
    for (const std::string& name : names)
      if (checkpoint_.Has(name)) return F32(name, shape, out);
    return F32(*names.begin(), shape, out);  // the error names the first spelling
  }
  Status I64(const std::string& name, const Shape& shape, HostTensor* out) {
    auto r = checkpoint_.ReadI64(name, shape);
    if (!r.ok()) return r.status();
    *out = std::move(r).value();
    return Status::Ok();
  }

 private:
  const Checkpoint& checkpoint_;
};

Status LoadCompressor(Reader& rd, const std::string& prefix, int64_t ratio, bool overlap, int64_t dim,
                      int64_t hidden, CompressorWeights* c) {
  c->ratio = ratio;
  c->dim = dim;
  c->coff = overlap ? 2 : 1;
  const int64_t width = c->coff * dim;
  PG_RETURN_IF_ERROR(rd.F32(prefix + "wkv.weight", {width, hidden}, &c->wkv));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "wgate.weight", {width, hidden}, &c->wgate));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "ape", {ratio, width}, &c->ape));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "norm.weight", {dim}, &c->norm));
  return Status::Ok();
}

// An expert, whole or its intermediate part `part` of `parts`.
Status LoadExpert(Reader& rd, const std::string& prefix, int64_t hidden, int64_t inter, int part, int parts,
                  ExpertWeights* e) {
  PG_RETURN_IF_ERROR(rd.F32(prefix + "w1.weight", {inter, hidden}, &e->w1));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "w2.weight", {hidden, inter}, &e->w2));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "w3.weight", {inter, hidden}, &e->w3));
  if (parts > 1) {
    const distributed::ShardRange r = distributed::EvenShard(inter, part, parts);
    e->w1 = Rows(e->w1, r.begin, r.end);
    e->w3 = Rows(e->w3, r.begin, r.end);
    e->w2 = Columns(e->w2, r.begin, r.end);
  }
  return Status::Ok();
}

Status LoadHc(Reader& rd, const std::string& prefix, int64_t mixes, int64_t flat, int64_t scales,
              HyperConnectionWeights* hc) {
  PG_RETURN_IF_ERROR(rd.F32(prefix + "fn", {mixes, flat}, &hc->fn));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "base", {mixes}, &hc->base));
  PG_RETURN_IF_ERROR(rd.F32(prefix + "scale", {scales}, &hc->scale));
  return Status::Ok();
}

// Layer i of `c` under `p` ("layers.<i>." or an MTP layer's "mtp.<n>.").
Status LoadLayer(Reader& rd, const ModelConfig& c, const ShardSpec& sh, int64_t i, const std::string& p,
                 LayerWeights* l) {
  const int64_t d = c.hidden_size;
  const int64_t hc = c.hc_mult;
  PG_RETURN_IF_ERROR(rd.F32(p + "attn_norm.weight", {d}, &l->attn_norm));
  PG_RETURN_IF_ERROR(rd.F32(p + "ffn_norm.weight", {d}, &l->ffn_norm));
  PG_RETURN_IF_ERROR(LoadHc(rd, p + "hc_attn_", (2 + hc) * hc, hc * d, 3, &l->hc_attn));
  PG_RETURN_IF_ERROR(LoadHc(rd, p + "hc_ffn_", (2 + hc) * hc, hc * d, 3, &l->hc_ffn));

  AttentionWeights& a = l->attn;
  const std::string ap = p + "attn.";
  const int64_t hd = c.head_dim;
  PG_RETURN_IF_ERROR(rd.F32(ap + "wq_a.weight", {c.q_lora_rank, d}, &a.wq_a));
  PG_RETURN_IF_ERROR(rd.F32(ap + "q_norm.weight", {c.q_lora_rank}, &a.q_norm));
  PG_RETURN_IF_ERROR(rd.F32(ap + "wq_b.weight", {c.num_heads * hd, c.q_lora_rank}, &a.wq_b));
  PG_RETURN_IF_ERROR(rd.F32(ap + "wkv.weight", {hd, d}, &a.wkv));
  PG_RETURN_IF_ERROR(rd.F32(ap + "kv_norm.weight", {hd}, &a.kv_norm));
  PG_RETURN_IF_ERROR(
      rd.F32(ap + "wo_a.weight", {c.o_groups * c.o_lora_rank, c.num_heads * hd / c.o_groups}, &a.wo_a));
  PG_RETURN_IF_ERROR(rd.F32(ap + "wo_b.weight", {d, c.o_groups * c.o_lora_rank}, &a.wo_b));
  PG_RETURN_IF_ERROR(rd.F32(ap + "attn_sink", {c.num_heads}, &a.sink));
  if (!sh.is_whole()) {
    // The rank's heads are whole groups (G % size == 0) or part of one (size % G == 0); its
    // wo_a block is those groups' rows and its heads' columns, its wo_b those groups' columns.
    const distributed::ShardRange heads = distributed::EvenShard(c.num_heads, sh.rank, sh.size);
    const int64_t per_group = c.num_heads / c.o_groups;
    const int64_t g0 = heads.begin / per_group, g1 = (heads.end + per_group - 1) / per_group;
    const int64_t col0 = (heads.begin - g0 * per_group) * hd;
    const int64_t cols = std::min(heads.size(), per_group) * hd;
    a.wq_b = Rows(a.wq_b, heads.begin * hd, heads.end * hd);
    a.sink = Rows(a.sink, heads.begin, heads.end);
    a.wo_a = Columns(Rows(a.wo_a, g0 * c.o_lora_rank, g1 * c.o_lora_rank), col0, col0 + cols);
    a.wo_b = Columns(a.wo_b, g0 * c.o_lora_rank, g1 * c.o_lora_rank);
  }
  const int64_t ratio = c.CompressRatio(i);
  const bool is_csa = c.layer_types[static_cast<size_t>(i)] == AttentionType::kCompressedSparse;
  if (ratio > 0) {
    a.compressor.emplace();
    PG_RETURN_IF_ERROR(LoadCompressor(rd, ap + "compressor.", ratio, is_csa, hd, d, &*a.compressor));
  }
  if (is_csa) {
    a.indexer.emplace();
    IndexerWeights& ix = *a.indexer;
    PG_RETURN_IF_ERROR(
        rd.F32(ap + "indexer.wq_b.weight", {c.index_n_heads * c.index_head_dim, c.q_lora_rank}, &ix.wq_b));
    PG_RETURN_IF_ERROR(rd.F32(ap + "indexer.weights_proj.weight", {c.index_n_heads, d}, &ix.weights_proj));
    PG_RETURN_IF_ERROR(
        LoadCompressor(rd, ap + "indexer.compressor.", ratio, true, c.index_head_dim, d, &ix.compressor));
  }

  MoeWeights& m = l->ffn;
  const std::string fp = p + "ffn.";
  const int64_t e = c.num_experts;
  PG_RETURN_IF_ERROR(rd.F32(fp + "gate.weight", {e, d}, &m.gate));
  if (c.mlp_layer_types[static_cast<size_t>(i)] == MoeType::kHash) {
    PG_RETURN_IF_ERROR(rd.I64(fp + "gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, &m.tid2eid));
    for (int64_t k = 0; k < m.tid2eid.view.numel(); ++k) {
      const int64_t id = m.tid2eid.i64()[k];
      if (id < 0 || id >= e) return InvalidArgument(fp + "gate.tid2eid holds an expert id out of range");
    }
  } else {
    PG_RETURN_IF_ERROR(rd.F32(fp + "gate.bias", {e}, &m.bias));
  }
  m.experts.resize(static_cast<size_t>(e));
  const distributed::ShardRange local =
      sh.expert_parallel ? distributed::EvenShard(e, sh.rank, sh.size) : distributed::ShardRange{0, e};
  const int expert_parts = sh.expert_parallel ? 1 : sh.size;
  for (int64_t x = local.begin; x < local.end; ++x)
    PG_RETURN_IF_ERROR(LoadExpert(rd, fp + "experts." + std::to_string(x) + ".", d, c.moe_intermediate_size,
                                  sh.rank, expert_parts, &m.experts[static_cast<size_t>(x)]));
  PG_RETURN_IF_ERROR(LoadExpert(rd, fp + "shared_experts.", d, c.moe_intermediate_size * c.num_shared_experts,
                                sh.rank, sh.size, &m.shared));
  return Status::Ok();
}

}  // namespace

ModelConfig MtpLayerConfig(const ModelConfig& config) {
  ModelConfig c = config;
  c.num_layers = 1;
  c.layer_types = {AttentionType::kSliding};
  c.mlp_layer_types = {MoeType::kLearned};
  return c;
}

ModelConfig BlockDrafterConfig(const ModelConfig& config) {
  ModelConfig c = config;
  c.num_layers = config.num_nextn_predict_layers;
  c.layer_types.assign(static_cast<size_t>(c.num_layers), AttentionType::kSliding);
  c.mlp_layer_types.assign(static_cast<size_t>(c.num_layers), MoeType::kLearned);
  return c;
}

namespace {

Status LoadBlockDrafter(Reader& rd, const ModelConfig& c, const ShardSpec& sh, BlockDrafterWeights* b) {
  const int64_t d = c.hidden_size;
  const auto taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
  const int64_t stages = c.num_nextn_predict_layers;
  const ModelConfig dc = BlockDrafterConfig(c);
  PG_RETURN_IF_ERROR(rd.F32("mtp.0.main_proj.weight", {d, taps * d}, &b->main_proj));
  PG_RETURN_IF_ERROR(rd.F32("mtp.0.main_norm.weight", {d}, &b->main_norm));
  b->stages.resize(static_cast<size_t>(stages));
  for (int64_t s = 0; s < stages; ++s)
    PG_RETURN_IF_ERROR(LoadLayer(rd, dc, sh, s, "mtp." + std::to_string(s) + ".", &b->stages[static_cast<size_t>(s)]));
  const std::string last = "mtp." + std::to_string(stages - 1) + ".";
  PG_RETURN_IF_ERROR(rd.F32(last + "norm.weight", {d}, &b->norm));
  PG_RETURN_IF_ERROR(LoadHc(rd, last + "hc_head_", c.hc_mult, c.hc_mult * d, 1, &b->hc_head));
  const Shape markov{c.vocab_size, c.dspark_markov_rank};
  const std::string mp = last + "markov_head.";
  PG_RETURN_IF_ERROR(rd.F32Any({mp + "markov_w1", mp + "markov_w1.weight"}, markov, &b->markov_w1));
  PG_RETURN_IF_ERROR(rd.F32Any({mp + "markov_w2", mp + "markov_w2.weight"}, markov, &b->markov_w2));
  const std::string cp = last + "confidence_head.proj";
  return rd.F32Any({cp + ".weight", cp}, {1, d + c.dspark_markov_rank}, &b->confidence);
}

}  // namespace

Status ValidateShard(const ModelConfig& c, const ShardSpec& sh) {
  if (sh.size < 1 || sh.rank < 0 || sh.rank >= sh.size) return InvalidArgument("shard rank outside its group");
  if (sh.is_whole()) return Status::Ok();
  auto divides = [&](int64_t n, const char* what) -> Status {
    if (n % sh.size == 0) return Status::Ok();
    return InvalidArgument(std::string("the model cannot be split over ") + std::to_string(sh.size) +
                           " ranks: " + what + " (" + std::to_string(n) + ") does not divide");
  };
  PG_RETURN_IF_ERROR(divides(c.num_heads, "num_attention_heads"));
  if (c.o_groups % sh.size != 0 && sh.size % c.o_groups != 0)
    return InvalidArgument("the model cannot be split over " + std::to_string(sh.size) + " ranks: o_groups (" +
                           std::to_string(c.o_groups) + ") neither divides nor is a divisor of it");
  PG_RETURN_IF_ERROR(divides(c.moe_intermediate_size * c.num_shared_experts, "the shared experts' intermediate size"));
  if (sh.expert_parallel) PG_RETURN_IF_ERROR(divides(c.num_experts, "n_routed_experts"));
  else PG_RETURN_IF_ERROR(divides(c.moe_intermediate_size, "moe_intermediate_size"));
  return Status::Ok();
}

Result<ModelWeights> LoadWeights(const ModelConfig& c, const Checkpoint& checkpoint, const ShardSpec& sh) {
  PG_RETURN_IF_ERROR(ValidateShard(c, sh));
  Reader rd(checkpoint);
  ModelWeights w;
  PG_RETURN_IF_ERROR(rd.F32("embed.weight", {c.vocab_size, c.hidden_size}, &w.embed));
  PG_RETURN_IF_ERROR(rd.F32("head.weight", {c.vocab_size, c.hidden_size}, &w.head));
  if (!sh.is_whole()) {
    const distributed::ShardRange v = distributed::PaddedShard(c.vocab_size, sh.rank, sh.size);
    w.head = Rows(w.head, v.begin, v.end);
  }
  PG_RETURN_IF_ERROR(rd.F32("norm.weight", {c.hidden_size}, &w.norm));
  PG_RETURN_IF_ERROR(LoadHc(rd, "hc_head_", c.hc_mult, c.hc_mult * c.hidden_size, 1, &w.hc_head));
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i)
    PG_RETURN_IF_ERROR(LoadLayer(rd, c, sh, i, "layers." + std::to_string(i) + ".", &w.layers[static_cast<size_t>(i)]));
  if (c.num_nextn_predict_layers > 0 && checkpoint.Has("mtp.0.e_proj.weight")) {
    const ModelConfig mc = MtpLayerConfig(c);
    const int64_t d = c.hidden_size;
    w.mtp.resize(static_cast<size_t>(c.num_nextn_predict_layers));
    for (int64_t n = 0; n < c.num_nextn_predict_layers; ++n) {
      const std::string p = "mtp." + std::to_string(n) + ".";
      MtpWeights& m = w.mtp[static_cast<size_t>(n)];
      PG_RETURN_IF_ERROR(rd.F32(p + "enorm.weight", {d}, &m.enorm));
      PG_RETURN_IF_ERROR(rd.F32(p + "hnorm.weight", {d}, &m.hnorm));
      PG_RETURN_IF_ERROR(rd.F32(p + "norm.weight", {d}, &m.norm));
      PG_RETURN_IF_ERROR(rd.F32(p + "e_proj.weight", {d, d}, &m.e_proj));
      PG_RETURN_IF_ERROR(rd.F32(p + "h_proj.weight", {d, d}, &m.h_proj));
      PG_RETURN_IF_ERROR(LoadHc(rd, p + "hc_head_", c.hc_mult, c.hc_mult * d, 1, &m.hc_head));
      PG_RETURN_IF_ERROR(LoadLayer(rd, mc, sh, 0, p, &m.layer));
    }
  }
  if (c.has_block_drafter() && checkpoint.Has("mtp.0.main_proj.weight")) {
    w.block_drafter.emplace();
    PG_RETURN_IF_ERROR(LoadBlockDrafter(rd, c, sh, &*w.block_drafter));
  }
  return w;
}

}  // namespace peregrine::deepseek_v4
