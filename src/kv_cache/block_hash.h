// Prefix-cache keys: a SHA-256 chain over token ids, one link per block, so a block's key
// names its whole prefix. The chain starts from a root that mixes in the request's
// cache_salt: requests with different salts never share a block, so one tenant cannot probe
// another's prompts through cache timing, and a collision-resistant hash keeps crafted
// prompts from aliasing a cached block.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace peregrine {

using BlockHash = std::array<uint8_t, 32>;

// The chain's root for requests carrying `salt` (empty: the shared root).
BlockHash PrefixRoot(std::string_view salt);
// The key of the block holding `tokens`, after the block (or root) keyed `parent`.
BlockHash ChainBlock(const BlockHash& parent, std::span<const int32_t> tokens);

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    std::memcpy(&v, h.data(), sizeof(v));  // already uniformly distributed
    return v;
  }
};

}  // namespace peregrine
