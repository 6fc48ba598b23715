#include "model/shard_index.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <unordered_set>

namespace peregrine {
namespace {

// Shard names must stay inside the checkpoint directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/\\") == std::string::npos && name.find('\0') == std::string::npos;
}

Result<ShardList> ReadIndex(const std::filesystem::path& dir, const std::filesystem::path& path) {
  constexpr uintmax_t kMaxIndexBytes = 256u << 20;
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return DataLoss(fmt::format("{}: {}", path.string(), ec.message()));
  if (size > kMaxIndexBytes)
    return InvalidArgument(fmt::format("{}: index is larger than 256 MiB", path.string()));
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) return DataLoss(fmt::format("{}: read failed", path.string()));

  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return InvalidArgument(
        fmt::format("{}: not valid JSON (error near byte {})", path.string(), e.byte));
  }
  const auto map_it = doc.is_object() ? doc.find("weight_map") : doc.end();
  if (!doc.is_object() || map_it == doc.end() || !map_it->is_object())
    return InvalidArgument(fmt::format("{}: no 'weight_map' object", path.string()));

  ShardList list;
  list.index_path = path;
  std::unordered_set<std::string> seen;
  for (const auto& [tensor, shard] : map_it->items()) {
    if (!shard.is_string())
      return InvalidArgument(
          fmt::format("{}: weight_map entry '{}' is not a file name", path.string(), tensor));
    const auto& file = shard.get_ref<const std::string&>();
    if (!IsPlainFileName(file))
      return InvalidArgument(
          fmt::format("{}: weight_map puts '{}' in '{}', which is not a file "
                      "name inside the checkpoint directory",
                      path.string(), tensor, file));
    if (seen.insert(file).second) list.shards.push_back(dir / file);
    list.weight_map.emplace_back(tensor, file);
  }
  if (list.shards.empty())
    return InvalidArgument(fmt::format("{}: weight_map is empty", path.string()));
  return list;
}

Result<ShardList> FindShardsChecked(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    return NotFound(fmt::format("checkpoint directory {} does not exist", dir.string()));
  const std::filesystem::path index = dir / kSafetensorsIndexName;
  if (std::filesystem::exists(index, ec)) return ReadIndex(dir, index);

  ShardList list;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") list.shards.push_back(entry.path());
  }
  if (ec) return DataLoss(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
  if (list.shards.empty())
    return NotFound(fmt::format("{} has no {} and no *.safetensors files", dir.string(),
                                kSafetensorsIndexName));
  std::sort(list.shards.begin(), list.shards.end());
  return list;
}

}  // namespace

Result<ShardList> FindShards(const std::filesystem::path& dir) {
  try {
    return FindShardsChecked(dir);
  } catch (const std::exception& e) {
    return DataLoss(fmt::format("{}: cannot read the shard list ({})", dir.string(), e.what()));
  }
}

}  // namespace peregrine
