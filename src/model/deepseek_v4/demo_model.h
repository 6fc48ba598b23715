// The embedded demo model: a small DeepSeek-V4-architecture config (every layer type, hash
// and learned MoE, 4 mHC streams, the real 129,280-entry vocabulary) with deterministic
// synthetic weights, so `peregrine serve` works with no download. Its text is not meaningful.
#pragma once

#include <memory>

#include "model/deepseek_v4/model.h"

namespace peregrine::deepseek_v4 {

ModelConfig DemoModelConfig();
Result<std::unique_ptr<Model>> LoadDemoModel(int num_threads);

}  // namespace peregrine::deepseek_v4
