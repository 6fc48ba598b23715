#include "kv_cache/block_hash.h"

#include <openssl/evp.h>

#include <vector>

#include "base/check.h"

namespace peregrine {

namespace {

BlockHash Sha256(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  BlockHash out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  PG_CHECK(ctx != nullptr, "EVP_MD_CTX_new failed");
  unsigned int len = 0;
  const bool ok = EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
                  EVP_DigestUpdate(ctx, a.data(), a.size()) == 1 &&
                  EVP_DigestUpdate(ctx, b.data(), b.size()) == 1 &&
                  EVP_DigestFinal_ex(ctx, out.data(), &len) == 1;
  EVP_MD_CTX_free(ctx);
  PG_CHECK(ok && len == out.size(), "SHA-256 failed");
  return out;
}

}  // namespace

BlockHash PrefixRoot(std::string_view salt) {
  static constexpr std::string_view kDomain = "peregrine prefix cache v1";
  // The domain string, its terminator, then the salt: no salt collides with another.
  std::vector<uint8_t> head(kDomain.begin(), kDomain.end());
  head.push_back(0);
  return Sha256(head, std::span(reinterpret_cast<const uint8_t*>(salt.data()), salt.size()));
}

BlockHash ChainBlock(const BlockHash& parent, std::span<const int32_t> tokens) {
  std::vector<uint8_t> bytes(tokens.size() * 4);
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<uint32_t>(tokens[i]);  // little-endian on every host
    bytes[4 * i] = static_cast<uint8_t>(v);
    bytes[4 * i + 1] = static_cast<uint8_t>(v >> 8);
    bytes[4 * i + 2] = static_cast<uint8_t>(v >> 16);
    bytes[4 * i + 3] = static_cast<uint8_t>(v >> 24);
  }
  return Sha256(parent, bytes);
}

}  // namespace peregrine
