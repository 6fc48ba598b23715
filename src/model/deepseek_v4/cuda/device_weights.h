// DeepSeek-V4 weights on the device, in the formats the CUDA forward reads: bf16 projection
// matrices, f32 norms / mHC mixers / biases, i32 hash-routing tables, and routed experts in
// bf16 or MXFP4 (packed e2m1 + UE8M0 scales per 32 inputs, dequantised inside the MoE kernel).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/allocator.h"
#include "base/status.h"
#include "base/tensor.h"
#include "config/model_config.h"
#include "model/checkpoint.h"
#include "model/deepseek_v4/weights.h"

namespace peregrine::deepseek_v4::cuda {

// A device allocation and its view.
struct DeviceTensor {
  peregrine::cuda::DeviceBuffer buffer;
  Tensor view;
};

struct DeviceCompressor {
  int64_t ratio = 0, dim = 0, coff = 1;
  DeviceTensor wkv_wgate;   // [2, coff*dim, D] bf16: wkv, then wgate
  DeviceTensor ape;         // [ratio, coff*dim] f32
  DeviceTensor norm;        // [dim] f32
};

struct DeviceHyperConnection {
  DeviceTensor fn;     // [M, hc*D] f32
  DeviceTensor base;   // [M] f32
  DeviceTensor scale;  // [3] (sub-layers) or [1] (head) f32
};

enum class ExpertFormat : uint8_t { kBF16, kMXFP4 };

// Routed experts of one layer, stacked: bf16 w1/w3 [E, I, D], w2 [E, D, I]; MXFP4 the same
// with packed bytes [.., cols/2] u8 and scales [.., cols/32] u8.
struct DeviceExperts {
  ExpertFormat format = ExpertFormat::kBF16;
  DeviceTensor w1, w3, w2;
  DeviceTensor w1_scale, w3_scale, w2_scale;  // MXFP4 only
};

enum class DenseFormat : uint8_t { kBF16, kFP8 };

// A dense projection y = x . w^T: w bf16 [M, K], or (DenseFormat::kFP8, M and K multiples of
// 128) e4m3 [M, K] with `scale` f32 [M/128, K/128] (backend/cuda/ops/fp8_projection.h).
struct DeviceProjection {
  DeviceTensor w;
  DeviceTensor scale;  // fp8 only
  bool is_fp8() const { return w.view.dtype == DType::kF8E4M3; }
};

struct DeviceLayer {
  DeviceTensor attn_norm, ffn_norm;  // [D] f32
  DeviceHyperConnection hc_attn, hc_ffn;
  DeviceProjection wq_a;  // [q_lora, D]
  DeviceTensor q_norm;   // [q_lora] f32
  DeviceProjection wq_b;  // [H*Dh, q_lora]
  DeviceProjection wkv;   // [Dh, D]
  DeviceTensor kv_norm;  // [Dh] f32
  DeviceTensor wo_a;     // [G, R, H*Dh/G] bf16
  DeviceProjection wo_b;  // [D, G*R]
  DeviceTensor sink;     // [H] f32
  std::optional<DeviceCompressor> compressor;  // CSA and HCA layers
  DeviceProjection index_wq_b;      // [IH*Id, q_lora] (CSA)
  DeviceTensor index_weights_proj;  // [IH, D] bf16, pre-scaled by IH^-1/2 (CSA)
  std::optional<DeviceCompressor> index_compressor;
  DeviceTensor gate;     // [E, D] bf16
  DeviceTensor bias;     // [E] f32 (learned routing)
  DeviceTensor tid2eid;  // [vocab, K] i32 (hash routing)
  DeviceExperts experts;
  DeviceProjection shared_w13;  // [2*I_shared, D]: gate rows, then up rows
  DeviceProjection shared_w2;   // [D, I_shared]
};

struct DeviceWeights {
  DeviceTensor embed;  // [vocab, D] bf16
  DeviceTensor head;   // [vocab, D] bf16; sharded: [ceil(vocab / size), D], rows past the vocabulary zero
  DeviceTensor norm;   // [D] f32
  DeviceHyperConnection hc_head;
  std::vector<DeviceLayer> layers;
  // Scratch of the FP8 projections' prefill path (quantised activations), shared by all of
  // them (one stream): u8 [max Fp8ProjectionWorkspaceBytes]; empty without FP8 projections.
  DeviceTensor fp8_workspace;
  uint64_t bytes = 0;  // device bytes held
  // This rank's part (all whole when unsharded): query heads, output groups (one group's
  // part counts as 1), routed experts [expert_begin, expert_begin + experts) (EP) or all of
  // them, and head rows (ceil(vocab / size) when sharded).
  int64_t heads = 0, groups = 0, expert_begin = 0, experts = 0, head_rows = 0;
};

// The checkpoint's first MTP layer (`mtp.0.*`, ../weights.h MtpWeights), the speculative
// drafter: e = e_proj(enorm(embed(next token))), each stream h_proj(hnorm(stream)) + e, one
// window-attention layer with learned routing, its own head mixer and norm; the main model's
// embedding and head.
struct DeviceMtp {
  DeviceLayer layer;
  DeviceTensor enorm, hnorm, norm;  // [D] f32
  DeviceTensor e_proj, h_proj;      // [D, D] bf16
  DeviceHyperConnection hc_head;
  uint64_t bytes = 0;
};

// DSpark's block drafter (`mtp.0` .. `mtp.S-1`, ../weights.h BlockDrafterWeights): main_x =
// main_norm(main_proj(the target's lane-averaged streams at its tap layers)), S window-attention
// stages with learned routing, the last stage's head mixer and norm, the main model's embedding
// and head, and a Markov correction of each block position's logits by the token before it.
struct DeviceBlockDrafter {
  DeviceTensor main_proj;            // [D, taps * D] bf16
  DeviceTensor main_norm, norm;      // [D] f32
  std::vector<DeviceLayer> stages;   // [S]
  DeviceHyperConnection hc_head;
  DeviceTensor markov_w1, markov_w2;  // [vocab, rank] bf16 (w1: rows gathered by token; w2: a projection)
  uint64_t bytes = 0;
};

struct WeightLoadOptions {
  // Generate every matrix on the device (uniform with variance 1/fan_in, the synthetic
  // checkpoint's rule) instead of reading it; vectors and tables still come from `checkpoint`
  // (a synthetic one). Makes V4-Flash-sized models without host work.
  bool synthetic_matrices = false;
  uint64_t seed = 0;
  // MXFP4 experts come from the checkpoint's MXFP4 tensors as stored, or are quantised at load
  // from float ones, or are generated (synthetic_matrices).
  ExpertFormat expert_format = ExpertFormat::kBF16;
  // kFP8: wq_a, wq_b, wkv, wo_b, indexer wq_b and the shared expert stay e4m3 with 128x128
  // block scales: the checkpoint's FP8 bytes when it stores them, else quantised at load
  // (power-of-two scales, kernels/quantize_fp8_blocks.cuh), or generated (synthetic).
  // Projections whose M or K is not a multiple of 128 stay bf16.
  DenseFormat dense_format = DenseFormat::kBF16;
  // After each layer and after the embeddings/head: parts done of num_layers + 1, device bytes.
  std::function<void(int64_t done, int64_t total, uint64_t bytes)> on_progress;
  // This rank's part of a tensor/expert-parallel group (ShardSpec, ../weights.h): the split
  // tensors are read as their slices only (FP8 blocks and MXFP4 scale groups stay whole:
  // a slice that would cut one is refused); synthetic ones are generated at the slice's shape.
  ShardSpec shard;
};

// Reads (or generates) every tensor the config implies, converts and uploads it; host
// copies are dropped tensor by tensor. Errors name the tensor; ResourceExhausted when the
// device is full.
Result<DeviceWeights> LoadDeviceWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                        const WeightLoadOptions& options, peregrine::cuda::CachingAllocator& allocator,
                                        cudaStream_t stream);

// The MTP layer (whole, unsharded) in the format LoadDeviceWeights gives the main layers.
// NotFound when the checkpoint has none.
Result<DeviceMtp> LoadDeviceMtp(const ModelConfig& config, const Checkpoint& checkpoint,
                                const WeightLoadOptions& options, peregrine::cuda::CachingAllocator& allocator,
                                cudaStream_t stream);

// The block drafter (whole, unsharded), its stages in the main layers' format. NotFound when
// the config names none (no dspark keys) or the checkpoint lacks `mtp.0.main_proj.weight`.
Result<DeviceBlockDrafter> LoadDeviceBlockDrafter(const ModelConfig& config, const Checkpoint& checkpoint,
                                                  const WeightLoadOptions& options,
                                                  peregrine::cuda::CachingAllocator& allocator, cudaStream_t stream);

}  // namespace peregrine::deepseek_v4::cuda
