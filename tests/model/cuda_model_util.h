// Shared steps of the CUDA model tests (cuda_parity_test, cuda_fp8_test, cuda_mxfp4_test):
// prefilling a prompt through the device model, and batched decode steps run on the device
// and the CPU backend side by side.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/deepseek_v4/cuda/cuda_model.h"
#include "model/deepseek_v4/model.h"

namespace peregrine::testing {

// Prefills `prompt` into `slot` from position 0 in steps of `chunk` tokens; returns the logits
// of every token [T, V] (empty, with the failure recorded, when a step fails).
std::vector<float> PrefillLogits(deepseek_v4::cuda::CudaModel& model, int32_t slot, std::span<const int32_t> prompt,
                                 int64_t chunk);

// Prefills the prompt's first lengths[i] tokens into a CPU sequence and into device slot
// first_slot + i (in steps of `chunk` tokens), then runs `steps` decode steps of batch 1, 2,
// 3, 1, ... (graph buckets with padding rows when graphs are on) on both backends, feeding
// each sequence the prompt's next tokens. Returns each step's relative L2 between the two
// backends' logits (empty, with the failure recorded, when a step fails).
std::vector<double> BatchedDecodeErrors(deepseek_v4::cuda::CudaModel& model, deepseek_v4::Model& cpu,
                                        std::span<const int32_t> prompt, std::span<const int64_t> lengths,
                                        int32_t first_slot, int64_t chunk, int steps = 6);

}  // namespace peregrine::testing
