#include "disaggregation/transfer_wire.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <nlohmann/json.hpp>

#include "base/check.h"

namespace peregrine::disaggregation {

namespace {

using nlohmann::json;

// Tokens per prompt and pages per room a meta may name (a 1M-token context with 256-token
// blocks has ~4,100 pages).
constexpr size_t kMaxPromptTokens = size_t{1} << 24;
constexpr size_t kMaxPages = size_t{1} << 20;
constexpr size_t kIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

std::vector<uint8_t> RoomBytes(uint64_t room) {
  std::vector<uint8_t> b(8);
  for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(room >> (8 * i));
  return b;
}

Status Bad(const std::string& what) { return InvalidArgument("KV transfer meta: " + what); }

// A first pass over CBOR from a peer: nesting at most kMaxDepth deep, no container declaring
// more entries than the bytes could hold, no syntax error. nlohmann's DOM parser recurses
// per level and throws on declared sizes past max_size() even without exceptions enabled.
class CborShape final : public nlohmann::json_sax<json> {
 public:
  explicit CborShape(size_t bytes) : bytes_(bytes) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(size_t n) override { return Open(n); }
  bool key(string_t&) override { return true; }
  bool end_object() override { return Close(); }
  bool start_array(size_t n) override { return Open(n); }
  bool end_array() override { return Close(); }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  static constexpr int kMaxDepth = 8;
  bool Open(size_t n) { return ++depth_ <= kMaxDepth && (n == static_cast<size_t>(-1) || n <= bytes_); }
  bool Close() {
    --depth_;
    return true;
  }
  size_t bytes_;
  int depth_ = 0;
};

// CBOR bytes as JSON, or discarded for anything malformed or shaped past CborShape.
json ParseCbor(std::span<const uint8_t> bytes) {
  CborShape shape(bytes.size());
  try {
    if (!json::sax_parse(bytes.begin(), bytes.end(), &shape, json::input_format_t::cbor)) return json::value_t::discarded;
    return json::from_cbor(bytes.begin(), bytes.end(), true, false);
  } catch (const json::exception&) {
    return json::value_t::discarded;
  }
}

}  // namespace

Result<WireHeader> ParseHeader(std::span<const uint8_t> bytes) {
  if (bytes.size() != sizeof(WireHeader)) return InvalidArgument("KV transfer message with a header of the wrong size");
  WireHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  if (h.magic != WireHeader::kMagic) return InvalidArgument("not a KV transfer message");
  if (h.version != WireHeader::kVersion) return InvalidArgument("KV transfer message of another version");
  if (h.kind < static_cast<uint16_t>(MessageKind::kPull) || h.kind > static_cast<uint16_t>(MessageKind::kRelease))
    return InvalidArgument("KV transfer message of an unknown kind");
  return h;
}

Digest Sha256(std::span<const uint8_t> bytes) {
  Digest out{};
  unsigned int len = 0;
  PG_CHECK(EVP_Digest(bytes.data(), bytes.size(), out.data(), &len, EVP_sha256(), nullptr) == 1 && len == out.size(),
           "SHA-256 failed");
  return out;
}

std::vector<Digest> Sha256Pages(std::span<const std::vector<uint8_t>> pages) {
  std::vector<Digest> out(pages.size());
  const size_t threads = std::min<size_t>({pages.size(), std::max(1u, std::thread::hardware_concurrency()), 8});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < pages.size(); i = next.fetch_add(1)) out[i] = Sha256(pages[i]);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

Digest Hmac(std::string_view secret, std::span<const uint8_t> message) {
  Digest out{};
  unsigned int len = 0;
  const unsigned char* r = HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), message.data(),
                                message.size(), out.data(), &len);
  PG_CHECK(r != nullptr && len == out.size(), "HMAC-SHA-256 failed");
  return out;
}

bool DigestEquals(const Digest& a, std::span<const uint8_t> b) {
  return b.size() == a.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Digest TaggedMac(std::string_view secret, const char (&tag)[5], uint64_t room) {
  std::vector<uint8_t> msg(tag, tag + 4);
  const std::vector<uint8_t> r = RoomBytes(room);
  msg.insert(msg.end(), r.begin(), r.end());
  return Hmac(secret, msg);
}

Digest PullMac(std::string_view secret, uint64_t room) { return TaggedMac(secret, "pull", room); }

Digest ReleaseMac(std::string_view secret, uint64_t room) { return TaggedMac(secret, "free", room); }

std::vector<uint8_t> EncodeMeta(const RoomMeta& meta, std::string_view secret, uint64_t room) {
  json m;
  m["error"] = meta.error;
  m["fingerprint"] = meta.fingerprint;
  m["prompt_ids"] = meta.prompt_ids;
  m["num_tokens"] = meta.num_tokens;
  m["num_cached_tokens"] = meta.num_cached_tokens;
  json top = json::array();
  for (const TokenLogprob& t : meta.first.top_logprobs) top.push_back({t.token, t.logprob});
  m["first"] = {{"token", meta.first.token}, {"logprob", meta.first.logprob}, {"top", top}};
  m["page_sizes"] = meta.page_sizes;
  json digests = json::array();
  for (const Digest& d : meta.page_digests) digests.push_back(json::binary(std::vector<uint8_t>(d.begin(), d.end())));
  m["page_digests"] = digests;
  if (meta.device)
    m["ipc"] = {{"handle", json::binary(meta.ipc_handle)}, {"host", meta.ipc_host}, {"arena_bytes", meta.arena_bytes},
                {"offsets", meta.page_offsets}, {"checksums", meta.page_checksums}};
  const std::vector<uint8_t> body = json::to_cbor(m);
  std::vector<uint8_t> signed_part = RoomBytes(room);
  signed_part.insert(signed_part.end(), body.begin(), body.end());
  const Digest mac = Hmac(secret, signed_part);
  json outer;
  outer["meta"] = json::binary(body);
  outer["mac"] = json::binary(std::vector<uint8_t>(mac.begin(), mac.end()));
  return json::to_cbor(outer);
}

Result<RoomMeta> DecodeMeta(std::span<const uint8_t> bytes, std::string_view secret, uint64_t room) {
  const json outer = ParseCbor(bytes);
  if (outer.is_discarded() || !outer.is_object() || !outer.contains("meta") || !outer.contains("mac") ||
      !outer["meta"].is_binary() || !outer["mac"].is_binary())
    return Bad("not a signed meta");
  const std::vector<uint8_t>& body = outer["meta"].get_binary();
  std::vector<uint8_t> signed_part = RoomBytes(room);
  signed_part.insert(signed_part.end(), body.begin(), body.end());
  if (!DigestEquals(Hmac(secret, signed_part), outer["mac"].get_binary()))
    return InvalidArgument("KV transfer meta not signed with this deployment's secret");
  const json m = ParseCbor(body);
  if (m.is_discarded() || !m.is_object()) return Bad("not an object");
  RoomMeta meta;
  try {
    meta.error = m.at("error").get<std::string>();
    meta.fingerprint = m.at("fingerprint").get<std::string>();
    const json& ids = m.at("prompt_ids");
    if (!ids.is_array() || ids.size() > kMaxPromptTokens) return Bad("prompt_ids");
    meta.prompt_ids = ids.get<std::vector<int32_t>>();
    meta.num_tokens = m.at("num_tokens").get<int64_t>();
    meta.num_cached_tokens = m.value("num_cached_tokens", int64_t{0});
    const json& first = m.at("first");
    meta.first.token = first.at("token").get<int32_t>();
    meta.first.logprob = first.at("logprob").get<float>();
    for (const json& t : first.at("top")) {
      if (!t.is_array() || t.size() != 2) return Bad("first.top");
      meta.first.top_logprobs.push_back({t[0].get<int32_t>(), t[1].get<float>()});
    }
    const json& sizes = m.at("page_sizes");
    const json& digests = m.at("page_digests");
    meta.device = m.contains("ipc");
    if (!sizes.is_array() || !digests.is_array() || sizes.size() > kMaxPages ||
        digests.size() != (meta.device ? 0 : sizes.size()))
      return Bad("pages");
    meta.page_sizes = sizes.get<std::vector<uint64_t>>();
    if (meta.device) {
      const json& ipc = m.at("ipc");
      const json& offsets = ipc.at("offsets");
      const json& checksums = ipc.at("checksums");
      if (!ipc.at("handle").is_binary() || ipc.at("handle").get_binary().size() != kIpcHandleBytes ||
          !offsets.is_array() || offsets.size() != sizes.size() || !checksums.is_array() ||
          checksums.size() != sizes.size())
        return Bad("device pages");
      meta.ipc_handle = ipc.at("handle").get_binary();
      meta.ipc_host = ipc.at("host").get<std::string>();
      meta.arena_bytes = ipc.at("arena_bytes").get<uint64_t>();
      meta.page_offsets = offsets.get<std::vector<uint64_t>>();
      meta.page_checksums = checksums.get<std::vector<uint64_t>>();
      for (size_t i = 0; i < sizes.size(); ++i)
        if (meta.page_offsets[i] > meta.arena_bytes || meta.page_sizes[i] > meta.arena_bytes - meta.page_offsets[i])
          return Bad("a device page outside its arena");
    }
    for (const json& d : digests) {
      if (!d.is_binary() || d.get_binary().size() != Digest{}.size()) return Bad("page digest");
      Digest digest{};
      std::copy(d.get_binary().begin(), d.get_binary().end(), digest.begin());
      meta.page_digests.push_back(digest);
    }
  } catch (const json::exception&) {
    return Bad("a field is missing or of the wrong type");
  }
  if (meta.error.empty() && (meta.num_tokens != static_cast<int64_t>(meta.prompt_ids.size()) || meta.page_sizes.empty()))
    return Bad("inconsistent sizes");
  return meta;
}

RoomMeta MetaOf(const TransferredKv& kv) {
  RoomMeta m;
  m.fingerprint = kv.fingerprint;
  m.prompt_ids = kv.prompt_ids;
  m.num_tokens = kv.num_tokens;
  m.num_cached_tokens = kv.num_cached_tokens;
  m.first = kv.first;
  if (kv.device != nullptr) {
    m.device = true;
    m.ipc_handle = kv.device->ipc_handle;
    m.ipc_host = kv.device->host;
    m.arena_bytes = kv.device->arena_bytes;
    m.page_sizes = kv.device->sizes;
    m.page_offsets = kv.device->offsets;
    m.page_checksums = kv.device->checksums;
    return m;
  }
  for (const std::vector<uint8_t>& p : kv.pages) m.page_sizes.push_back(p.size());
  m.page_digests = Sha256Pages(kv.pages);
  return m;
}

}  // namespace peregrine::disaggregation
