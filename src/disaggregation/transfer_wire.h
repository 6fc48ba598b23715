// What the KV transfer's messages carry (the transport, UCX active messages, frames and moves
// them; kv_sender.h and kv_receiver.h). A decode server pulls one room (one request's KV) from
// a prefill server:
//   decode -> prefill  kPull:  header, data = HMAC-SHA-256(secret, "pull" . room)
//   prefill -> decode  kMeta:  header, data = CBOR {meta: CBOR of RoomMeta, mac: HMAC(secret, room . meta)}
//   prefill -> decode  kPage:  header with the page index, data = the page's bytes
//   decode -> prefill  kRelease: header, data = HMAC-SHA-256(secret, "free" . room)
// The meta names every page's size and SHA-256 digest; the receiver checks each page against
// it and the meta against the shared secret, so a corrupted, truncated or forged transfer is
// refused, never loaded. Over CUDA IPC the pages stay in the prefill process's device
// memory: the meta names its arena (the IPC handle), each page's offset and checksum
// (runtime/kv_page_checksum.h), no kPage follows, and the decode server sends kRelease once
// it has copied them (the room's pages are then freed).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "scheduler/engine_request.h"

namespace peregrine::disaggregation {

using Digest = std::array<uint8_t, 32>;

enum class MessageKind : uint16_t { kPull = 1, kMeta = 2, kPage = 3, kRelease = 4 };

// The fixed header of every message (UCX's active-message header).
struct WireHeader {
  uint32_t magic = kMagic;
  uint16_t version = kVersion;
  uint16_t kind = 0;
  uint64_t room = 0;
  uint32_t index = 0;  // kPage: the page
  uint32_t reserved = 0;

  static constexpr uint32_t kMagic = 0x564b4750;  // "PGKV"
  static constexpr uint16_t kVersion = 1;
};
static_assert(sizeof(WireHeader) == 24);

// A header from bytes: InvalidArgument for a wrong size, magic, version or kind.
Result<WireHeader> ParseHeader(std::span<const uint8_t> bytes);

// What a prefill server answers a pull with: the transferred KV's description, or the
// reason there is none (error non-empty).
struct RoomMeta {
  std::string error;
  std::string fingerprint;
  std::vector<int32_t> prompt_ids;
  int64_t num_tokens = 0;
  int64_t num_cached_tokens = 0;
  SampleResult first;
  std::vector<uint64_t> page_sizes;
  std::vector<Digest> page_digests;  // host pages
  // Device pages (CUDA IPC), instead of the digests: DeviceKvPages' fields.
  bool device = false;
  std::vector<uint8_t> ipc_handle;
  std::string ipc_host;
  uint64_t arena_bytes = 0;
  std::vector<uint64_t> page_offsets;
  std::vector<uint64_t> page_checksums;
};

Digest Sha256(std::span<const uint8_t> bytes);
// Every page's SHA-256, on up to 8 threads (a room's pages are hashed on both sides).
std::vector<Digest> Sha256Pages(std::span<const std::vector<uint8_t>> pages);
Digest Hmac(std::string_view secret, std::span<const uint8_t> message);
// Constant-time comparison (a MAC check must not leak how much of it matched).
bool DigestEquals(const Digest& a, std::span<const uint8_t> b);

// The kPull and kRelease data for a room.
Digest PullMac(std::string_view secret, uint64_t room);
Digest ReleaseMac(std::string_view secret, uint64_t room);

// kMeta data: the meta and its MAC, and back. DecodeMeta refuses (InvalidArgument) bytes
// that are not such a message, whose MAC does not match, or whose fields are inconsistent.
std::vector<uint8_t> EncodeMeta(const RoomMeta& meta, std::string_view secret, uint64_t room);
Result<RoomMeta> DecodeMeta(std::span<const uint8_t> bytes, std::string_view secret, uint64_t room);

// The meta of an exported KV: sizes and digests of its host pages, or where its device pages
// are.
RoomMeta MetaOf(const TransferredKv& kv);

}  // namespace peregrine::disaggregation
