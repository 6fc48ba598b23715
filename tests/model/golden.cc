#include "golden.h"

#include <fstream>
#include <sstream>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "model/mapped_file.h"
#include "model/safetensors.h"

namespace peregrine::testing {

Result<Golden> ReadGolden(const std::filesystem::path& file) {
  PG_ASSIGN_OR_RETURN(MappedFile mapped, MappedFile::Open(file));
  PG_ASSIGN_OR_RETURN(SafetensorsHeader header, ParseSafetensors(mapped.bytes(), file.string()));
  Golden g;
  for (const SafetensorsEntry& e : header.entries) {
    const uint8_t* p = mapped.bytes().data() + e.offset;
    const int64_t n = e.shape.numel();
    if (e.dtype == DType::kI64) {
      std::vector<int32_t> ids(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, p + i * 8, 8);
        ids[static_cast<size_t>(i)] = static_cast<int32_t>(v);
      }
      (e.name == "prompt_ids" ? g.prompt_ids : g.generated_ids) = std::move(ids);
    } else if (e.dtype == DType::kF32) {
      std::vector<float> v(static_cast<size_t>(n));
      std::memcpy(v.data(), p, static_cast<size_t>(n) * 4);
      g.vocab = e.shape[1];
      (e.name == "full_logits" ? g.full_logits : g.step_logits) = std::move(v);
    }
  }
  if (g.prompt_ids.empty() || g.generated_ids.empty() || g.full_logits.empty() || g.step_logits.empty())
    return DataLoss(file.string() + ": golden file lacks a tensor");
  return g;
}

double RelativeL2(const float* a, const float* b, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

int64_t ArgMax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

std::filesystem::path SourceRoot() {
  // A binary built elsewhere (the GPU machine runs prebuilt ones) finds the tree through
  // PEREGRINE_SOURCE_DIR in the environment.
  const char* env = std::getenv("PEREGRINE_SOURCE_DIR");
  return env != nullptr && *env != '\0' ? env : PEREGRINE_SOURCE_DIR;
}

std::vector<std::filesystem::path> FixtureDirs() {
  std::vector<std::filesystem::path> dirs;
  const std::filesystem::path root = SourceRoot();
  for (const auto& e : std::filesystem::directory_iterator(root / "tests" / "fixtures"))
    if (e.is_directory() && std::filesystem::exists(e.path() / "golden.safetensors")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

std::vector<std::filesystem::path> Bf16FixtureDirs() {
  std::vector<std::filesystem::path> dirs;
  for (const auto& d : FixtureDirs()) {
    std::ifstream in(d / "meta.json");
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find("\"bf16_margins\": true") != std::string::npos) dirs.push_back(d);
  }
  return dirs;
}

}  // namespace peregrine::testing
