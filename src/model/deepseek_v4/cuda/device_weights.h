// DeepSeek-V4 weights on the device, in the formats the CUDA forward reads: bf16 projection
// matrices, f32 norms / mHC mixers / biases, i32 hash-routing tables, and routed experts in
// bf16 or MXFP4 (packed e2m1 + UE8M0 scales per 32 inputs, dequantised inside the MoE kernel).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <cuda_runtime_api.h>

#include "backend/cuda/allocator.h"
#include "base/status.h"
#include "base/tensor.h"
#include "config/model_config.h"
#include "model/checkpoint.h"

namespace peregrine::deepseek_v4::cuda {

// A device allocation and its view.
struct DeviceTensor {
  peregrine::cuda::DeviceBuffer buffer;
  Tensor view;
};

struct DeviceCompressor {
  int64_t ratio = 0, dim = 0, coff = 1;
  DeviceTensor wkv, wgate;  // [coff*dim, D] bf16
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

struct DeviceLayer {
  DeviceTensor attn_norm, ffn_norm;  // [D] f32
  DeviceHyperConnection hc_attn, hc_ffn;
  DeviceTensor wq_a;     // [q_lora, D] bf16
  DeviceTensor q_norm;   // [q_lora] f32
  DeviceTensor wq_b;     // [H*Dh, q_lora] bf16
  DeviceTensor wkv;      // [Dh, D] bf16
  DeviceTensor kv_norm;  // [Dh] f32
  DeviceTensor wo_a;     // [G, R, H*Dh/G] bf16
  DeviceTensor wo_b;     // [D, G*R] bf16
  DeviceTensor sink;     // [H] f32
  std::optional<DeviceCompressor> compressor;  // CSA and HCA layers
  DeviceTensor index_wq_b;          // [IH*Id, q_lora] bf16 (CSA)
  DeviceTensor index_weights_proj;  // [IH, D] bf16, pre-scaled by IH^-1/2 (CSA)
  std::optional<DeviceCompressor> index_compressor;
  DeviceTensor gate;     // [E, D] bf16
  DeviceTensor bias;     // [E] f32 (learned routing)
  DeviceTensor tid2eid;  // [vocab, K] i32 (hash routing)
  DeviceExperts experts;
  DeviceTensor shared_w13;            // [2*I_shared, D] bf16: gate rows, then up rows
  DeviceTensor shared_w2;             // [D, I_shared] bf16
};

struct DeviceWeights {
  DeviceTensor embed;  // [vocab, D] bf16
  DeviceTensor head;   // [vocab, D] bf16
  DeviceTensor norm;   // [D] f32
  DeviceHyperConnection hc_head;
  std::vector<DeviceLayer> layers;
  uint64_t bytes = 0;  // device bytes held
};

struct WeightLoadOptions {
  // Generate every matrix on the device (uniform with variance 1/fan_in, the synthetic
  // checkpoint's rule) instead of reading it; vectors and tables still come from `checkpoint`
  // (a synthetic one). Makes V4-Flash-sized models without host work.
  bool synthetic_matrices = false;
  uint64_t seed = 0;
  ExpertFormat expert_format = ExpertFormat::kBF16;  // MXFP4 needs synthetic_matrices
};

// Reads (or generates) every tensor the config implies, converts and uploads it; host
// copies are dropped tensor by tensor. Errors name the tensor; ResourceExhausted when the
// device is full.
Result<DeviceWeights> LoadDeviceWeights(const ModelConfig& config, const Checkpoint& checkpoint,
                                        const WeightLoadOptions& options, peregrine::cuda::CachingAllocator& allocator,
                                        cudaStream_t stream);

}  // namespace peregrine::deepseek_v4::cuda
