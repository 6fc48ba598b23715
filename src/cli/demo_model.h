// The trained demo model (models/deepseek-v4-demo: a small DeepSeek-V4 in the official
// release's format, tools/train_demo_model.py) embedded in the binary, so `peregrine serve`
// with no --model-path serves real text. The checkpoint loader maps files, so the embedded
// files are written once into a cache directory and opened from there.
#pragma once

#include <filesystem>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace peregrine::cli {

struct EmbeddedFile {
  std::string_view name;
  std::string_view bytes;
};

// Empty when the binary was built without the model.
std::vector<EmbeddedFile> DemoModelFiles();

// The directory holding the demo model's files: `$PEREGRINE_CACHE_DIR`, else
// `$XDG_CACHE_HOME/peregrine`, else `~/.cache/peregrine`, else the system temp directory,
// under `deepseek-v4-demo-<content hash>`; written (each file atomically) when missing.
// NotFound when the binary has no demo model.
Result<std::filesystem::path> DemoModelDir();

}  // namespace peregrine::cli
