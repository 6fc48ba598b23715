// The KV transfer's message parsing on arbitrary bytes (what a peer on the transfer port, or
// one posing as a prefill server, can send). The first byte picks the target:
//   0: a message header;
//   1: a whole meta message under the deployment's secret (almost never authentic);
//   2: the rest as the meta's inner CBOR, signed here, so the field checks behind the MAC run.
// Nothing may crash; an accepted meta is consistent: one digest per page size (device pages:
// one offset and checksum each, inside the arena), and without an error a prompt of
// num_tokens ids and at least one page.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include <nlohmann/json.hpp>

#include "disaggregation/transfer_wire.h"

namespace {

void Require(bool condition) {
  if (!condition) std::abort();
}

constexpr char kSecret[] = "fuzz-deployment-secret";
constexpr uint64_t kRoom = 42;

void Check(const peregrine::Result<peregrine::disaggregation::RoomMeta>& meta) {
  if (!meta.ok()) {
    Require(!meta.status().message().empty());
    return;
  }
  const size_t n = meta->page_sizes.size();
  if (meta->device) {
    // Device pages: no digests; an offset and a checksum per page, every page in the arena.
    Require(meta->page_digests.empty() && meta->page_offsets.size() == n && meta->page_checksums.size() == n);
    Require(meta->ipc_handle.size() == 64);
    for (size_t i = 0; i < n; ++i)
      Require(meta->page_offsets[i] <= meta->arena_bytes &&
              meta->page_sizes[i] <= meta->arena_bytes - meta->page_offsets[i]);
  } else {
    Require(meta->page_digests.size() == n);
  }
  if (meta->error.empty()) {
    Require(meta->num_tokens == static_cast<int64_t>(meta->prompt_ids.size()));
    Require(!meta->page_sizes.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace peregrine::disaggregation;
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      const auto h = ParseHeader(rest);
      if (h.ok()) Require(h->magic == WireHeader::kMagic && h->version == WireHeader::kVersion);
      break;
    }
    case 1:
      Check(DecodeMeta(rest, kSecret, kRoom));
      break;
    default: {
      std::vector<uint8_t> signed_part(8);
      for (int i = 0; i < 8; ++i) signed_part[static_cast<size_t>(i)] = static_cast<uint8_t>(kRoom >> (8 * i));
      signed_part.insert(signed_part.end(), rest.begin(), rest.end());
      const Digest mac = Hmac(kSecret, signed_part);
      nlohmann::json outer;
      outer["meta"] = nlohmann::json::binary(std::vector<uint8_t>(rest.begin(), rest.end()));
      outer["mac"] = nlohmann::json::binary(std::vector<uint8_t>(mac.begin(), mac.end()));
      Check(DecodeMeta(nlohmann::json::to_cbor(outer), kSecret, kRoom));
      break;
    }
  }
  return 0;
}
