// Model families by model_type: each family's registration function adds its factory at
// startup, and the runtime asks for the config's model_type (a second family needs no runtime
// copy). No global state: the caller owns the registry.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace peregrine {

template <typename Factory>
class ModelRegistry {
 public:
  void Register(std::string model_type, Factory factory) { factories_.emplace_back(std::move(model_type), std::move(factory)); }
  // Unimplemented for a model_type nobody registered.
  Result<Factory> Find(const std::string& model_type) const {
    for (const auto& [type, factory] : factories_)
      if (type == model_type) return factory;
    return Unimplemented("this backend has no implementation of model_type '" + model_type + "'");
  }

 private:
  std::vector<std::pair<std::string, Factory>> factories_;
};

}  // namespace peregrine
