// Cryptographic digests (OpenSSL): SHA-256 of data, in one call or fed in
// pieces (a shard verified while it is copied), and HMAC-SHA256, keyed
// hashes that prove who holds a secret without revealing it (endpoint
// proofs, a rendezvous's per-attempt key prefix). Digests are lowercase hex.
// Unlike common/fingerprint.h, these authenticate: changing data to keep a
// SHA-256 is infeasible (a CRC-32 is forced with 4 bytes).
// Sha256 objects are not shared between threads; the functions are pure.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace scdino {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const void* data, size_t n);
  /// The digest of everything fed; the object is spent.
  std::string HexDigest();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

std::string Sha256Hex(std::string_view data);

/// `n` bytes as lowercase hex, two digits a byte: the one encoder of
/// digests, secrets and certificate fingerprints.
std::string HexEncode(const void* data, size_t n);

/// HMAC-SHA256 of `message` keyed by `key`, as 64 hex digits.
std::string HmacSha256Hex(std::string_view key, std::string_view message);

}  // namespace scdino
