#include "model/synthetic_checkpoint.h"

#include <cmath>
#include <string>

namespace peregrine {
namespace {

// splitmix64: a small, well-distributed generator; one stream per tensor.
struct SplitMix64 {
  uint64_t state;
  uint64_t Next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float Symmetric() { return static_cast<float>(static_cast<double>(Next() >> 11) * 0x1.0p-52 - 1.0); }
};

uint64_t HashName(std::string_view name, uint64_t seed) {
  uint64_t h = 1469598103934665603ULL ^ seed;  // FNV-1a
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ULL;
  return h;
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

class SyntheticCheckpoint final : public Checkpoint {
 public:
  SyntheticCheckpoint(const ModelConfig& config, uint64_t seed) : config_(config), seed_(seed) {}

  bool Has(std::string_view) const override { return true; }

  Result<HostTensor> ReadF32(std::string_view name, const Shape& shape) const override {
    auto storage = std::make_shared<std::vector<float>>(static_cast<size_t>(shape.numel()));
    SplitMix64 rng{HashName(name, seed_)};
    float center = 0.0f;
    float spread = 0.5f;
    if (EndsWith(name, "norm.weight")) {
      center = 1.0f;
      spread = 0.1f;
    } else if (EndsWith(name, "_scale")) {
      center = 1.0f;
      spread = 0.2f;
    } else if (shape.ndim() == 2 && !EndsWith(name, "ape")) {
      // Uniform with variance 1/fan_in: unit-scale outputs for unit-scale inputs.
      spread = std::sqrt(3.0f / static_cast<float>(shape[1]));
    }
    for (float& v : *storage) v = center + spread * rng.Symmetric();
    if (EndsWith(name, "weights_proj.weight"))
      for (float& v : *storage) v = std::fabs(v);  // indexer heads weigh positively
    total_bytes_ += storage->size() * sizeof(float);
    HostTensor t;
    t.view = Tensor::Contiguous(storage->data(), DType::kF32, shape);
    t.storage = std::move(storage);
    return t;
  }

  Result<HostTensor> ReadI64(std::string_view name, const Shape& shape) const override {
    // Only tid2eid is integer: each row a set of distinct experts.
    if (shape.ndim() != 2) return InvalidArgument("synthetic integer tensor must be 2-D: " + std::string(name));
    auto storage = std::make_shared<std::vector<int64_t>>(static_cast<size_t>(shape.numel()));
    SplitMix64 rng{HashName(name, seed_)};
    const int64_t k = shape[1];
    const int64_t e = config_.num_experts;
    if (k > e) return InvalidArgument("more experts per token than experts");
    for (int64_t r = 0; r < shape[0]; ++r) {
      int64_t* row = storage->data() + r * k;
      for (int64_t j = 0; j < k; ++j) {
        int64_t pick;
        bool fresh;
        do {
          pick = static_cast<int64_t>(rng.Next() % static_cast<uint64_t>(e));
          fresh = true;
          for (int64_t i = 0; i < j; ++i) fresh = fresh && row[i] != pick;
        } while (!fresh);
        row[j] = pick;
      }
    }
    HostTensor t;
    t.view = Tensor::Contiguous(storage->data(), DType::kI64, shape);
    t.storage = std::move(storage);
    return t;
  }

  // Every name exists, so no shape can be told without a request.
  Result<Shape> LogicalShape(std::string_view name) const override {
    return Unimplemented("synthetic weights have no stored shape: " + std::string(name));
  }
  std::vector<std::string> CanonicalNames() const override { return {}; }
  uint64_t TotalBytes() const override { return total_bytes_; }

 private:
  ModelConfig config_;
  uint64_t seed_;
  mutable uint64_t total_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Checkpoint> MakeSyntheticCheckpoint(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<SyntheticCheckpoint>(config, seed);
}

}  // namespace peregrine
