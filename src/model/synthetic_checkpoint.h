// A Checkpoint that generates deterministic random weights instead of reading files: any
// canonical name yields a tensor of the requested shape, drawn from a generator seeded by
// (seed, name), with magnitudes that keep activations in range (unit-variance rows for
// projections, ~1 for norm weights and mHC scales). Used for the embedded demo model,
// benchmarks at arbitrary shapes, and the synthetic-weights mode.
#pragma once

#include <cstdint>
#include <memory>

#include "config/model_config.h"
#include "model/checkpoint.h"

namespace peregrine {

std::unique_ptr<Checkpoint> MakeSyntheticCheckpoint(const ModelConfig& config, uint64_t seed);

}  // namespace peregrine
