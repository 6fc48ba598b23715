// The DeepSeek-V4 tokenizer.json embedded in the binary for the demo model, when the build
// found one (tools/setup.sh installs it with the test-side Python packages).
#pragma once

#include <string_view>

namespace peregrine::cli {

// Empty when the binary was built without it.
std::string_view DemoTokenizerJson();

}  // namespace peregrine::cli
