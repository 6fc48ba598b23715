// Checkpoint: a model directory's safetensors shards (memory-mapped) behind canonical
// tensor names, with dequantisation to f32 for the CPU backend.
//
// Canonical names follow the official release scheme without a prefix:
//   embed.weight, head.weight, norm.weight, hc_head_{fn,base,scale},
//   layers.N.{attn_norm,ffn_norm}.weight, layers.N.hc_{attn,ffn}_{fn,base,scale},
//   layers.N.attn.{wq_a,wq_b,wkv,wo_a,wo_b}.weight, layers.N.attn.{q_norm,kv_norm}.weight,
//   layers.N.attn.attn_sink, layers.N.attn.compressor.{wkv,wgate,norm}.weight,
//   layers.N.attn.compressor.ape, layers.N.attn.indexer.{wq_b,weights_proj}.weight,
//   layers.N.attn.indexer.compressor.{wkv,wgate,norm}.weight, ...indexer.compressor.ape,
//   layers.N.ffn.gate.{weight,bias,tid2eid}, layers.N.ffn.experts.E.{w1,w2,w3}.weight,
//   layers.N.ffn.shared_experts.{w1,w2,w3}.weight
// HF transformers' saved names (`model.` prefix, `model.embed_tokens.weight`,
// `model.hc_head.hc_fn`, `attn.norm.weight` for kv_norm, `head.weight`) map onto these.
// Quantised weights: `<name>` F8_E4M3 + `<name minus .weight>.scale` UE8M0 128x128 blocks;
// routed experts `I8` packed e2m1 (low nibble = even element) + UE8M0 scale per 32 inputs.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"

namespace peregrine {

// A contiguous host tensor: borrows the mapped file when the stored bytes are already in
// the requested type, else owns the converted copy. Movable; the view stays valid while
// the HostTensor and the Checkpoint that produced it live.
struct HostTensor {
  Tensor view;
  std::shared_ptr<void> storage;  // owned bytes, or null when borrowing the mapping

  const float* f32() const { return view.as<const float>(); }
  const int64_t* i64() const { return view.as<const int64_t>(); }
};

// A weight stored as FP8 e4m3 with 128x128 block scales, as stored: the codes [rows, cols]
// (f8e4m3, possibly borrowing the mapping) and the scales as f32 [ceil(rows/128),
// ceil(cols/128)] (UE8M0 converted exactly). dequant = code * scale, as ReadF32 computes it.
struct Fp8BlockTensor {
  HostTensor codes;
  HostTensor scales;
};

// A weight stored as MXFP4 (the routed experts), as stored: the packed e2m1 codes [rows,
// cols/2] (u8, two per byte, the low nibble the even column) and the UE8M0 scales [rows,
// cols/32] (u8 exponent bytes), both borrowing the mapping. dequant = e2m1(code) * 2^(scale-127),
// as ReadF32 computes it.
struct Mxfp4Tensor {
  HostTensor codes;
  HostTensor scales;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  // Opens DIR: `model.safetensors.index.json` + shards, or every `*.safetensors` in DIR.
  // Validates every header (size, offsets, dtype x shape = byte length, no overlap,
  // in-bounds) before returning. Errors name the file and the tensor.
  static Result<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);

  virtual bool Has(std::string_view canonical_name) const = 0;
  // Reads a floating tensor as f32, dequantising bf16/f16/fp8(+scale)/mxfp4(+scale).
  // Fails (naming file and tensor) when missing or when the logical shape != expected.
  virtual Result<HostTensor> ReadF32(std::string_view canonical_name,
                                     const Shape& expected) const = 0;
  // The stored codes and block scales of a weight kept as FP8 e4m3 + 128x128 block scales,
  // for backends that compute on them directly; nullopt when the tensor is stored in another
  // format (read it with ReadF32). Fails like ReadF32 (missing, wrong logical shape, bad
  // scale). The default (checkpoints that never store FP8) always says nullopt.
  virtual Result<std::optional<Fp8BlockTensor>> ReadFp8Blocks(std::string_view canonical_name,
                                                              const Shape& expected) const;
  // The stored codes and scales of a weight kept as MXFP4, for backends that compute on them
  // directly; nullopt when the tensor is stored in another format. `expected` is the logical
  // shape (twice the stored columns). Fails like ReadF32. The default always says nullopt.
  virtual Result<std::optional<Mxfp4Tensor>> ReadMxfp4(std::string_view canonical_name, const Shape& expected) const;
  // The stored bf16 values of a tensor kept elementwise as bf16, borrowing the mapping (for
  // loaders that upload them as they are); nullopt when it is stored in another type. Fails
  // like ReadF32. The default always says nullopt.
  virtual Result<std::optional<HostTensor>> ReadBF16(std::string_view canonical_name, const Shape& expected) const;
  // Reads an integer tensor (I64 or I32 on disk) as i64.
  virtual Result<HostTensor> ReadI64(std::string_view canonical_name,
                                     const Shape& expected) const = 0;
  // The logical shape ReadF32/ReadI64 would return (MXFP4 experts: twice the stored
  // columns). NotFound when missing, DataLoss when a quantised weight's scale disagrees.
  virtual Result<Shape> LogicalShape(std::string_view canonical_name) const = 0;
  // Sorted canonical names of the logical tensors: every stored tensor except the `.scale`
  // tensors that belong to a `.weight` (those are read through their weight).
  virtual std::vector<std::string> CanonicalNames() const = 0;
  // Total bytes of tensor data across shards.
  virtual uint64_t TotalBytes() const = 0;
};

}  // namespace peregrine
