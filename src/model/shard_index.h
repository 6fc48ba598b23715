// Which safetensors files make up a checkpoint directory: the shards named by
// `model.safetensors.index.json` ({"metadata": ..., "weight_map": {tensor: shard}}), or, with
// no index, every `*.safetensors` file in the directory (sorted by name).
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace peregrine {

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";

struct ShardList {
  std::vector<std::filesystem::path> shards;  // unique, in first-mention order
  // From the index only: tensor name -> shard file name, as written.
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::filesystem::path index_path;  // empty without an index
};

// NotFound when DIR does not exist or holds neither an index nor a shard. InvalidArgument for
// a malformed index (not JSON, no weight_map object, a shard name that is not a plain file
// name). Shard existence is checked when the shards are opened.
Result<ShardList> FindShards(const std::filesystem::path& dir);

}  // namespace peregrine
