#include "wire.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <collie/error.hpp>

namespace collie::transport::wire {

Proof peer_proof(std::string_view token, const Nonce& nonce, std::uint64_t group_id,
                 std::uint32_t from, std::uint32_t to) {
  constexpr std::string_view kLabel = "collie-peer v1";
  std::array<std::uint8_t, kLabel.size() + kNonceBytes + 16> message{};
  std::memcpy(message.data(), kLabel.data(), kLabel.size());
  std::memcpy(message.data() + kLabel.size(), nonce.data(), kNonceBytes);
  put64(message.data() + kLabel.size() + kNonceBytes, group_id);
  put32(message.data() + kLabel.size() + kNonceBytes + 8, from);
  put32(message.data() + kLabel.size() + kNonceBytes + 12, to);
  Proof proof{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), message.data(),
           message.size(), proof.data(), &length) == nullptr ||
      length != proof.size()) {
    throw Error("peer handshake: HMAC-SHA256 failed (OpenSSL)");
  }
  return proof;
}

bool proofs_equal(const Proof& a, const Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Nonce random_nonce() {
  Nonce nonce{};
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    throw Error("peer handshake: the system random generator failed (OpenSSL RAND_bytes)");
  }
  return nonce;
}

std::uint64_t random_u64() {
  std::array<std::uint8_t, 8> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw Error("the system random generator failed (OpenSSL RAND_bytes)");
  }
  return get64(bytes.data());
}

}  // namespace collie::transport::wire
