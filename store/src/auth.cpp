#include "auth.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <collie/error.hpp>

namespace collie::store::auth {

void random_bytes(std::span<std::uint8_t> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    throw Error("the system random generator failed (OpenSSL RAND_bytes)");
  }
}

wire::Proof hmac_sha256(std::string_view key, std::span<const std::uint8_t> message) {
  wire::Proof proof{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(),
           proof.data(), &length) == nullptr ||
      length != proof.size()) {
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  }
  return proof;
}

wire::Nonce random_nonce() {
  wire::Nonce nonce{};
  random_bytes(nonce);
  return nonce;
}

namespace {

wire::Proof hmac(std::string_view token, std::string_view label, const wire::Nonce& first,
                 const wire::Nonce& second) {
  std::vector<unsigned char> message(label.begin(), label.end());
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  return hmac_sha256(token, message);
}

}  // namespace

wire::Proof server_proof(std::string_view token, const wire::Nonce& client_nonce,
                         const wire::Nonce& server_nonce) {
  return hmac(token, "collie-store v1 server", client_nonce, server_nonce);
}

wire::Proof client_proof(std::string_view token, const wire::Nonce& client_nonce,
                         const wire::Nonce& server_nonce) {
  return hmac(token, "collie-store v1 client", server_nonce, client_nonce);
}

bool proofs_equal(const wire::Proof& a, const wire::Proof& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace collie::store::auth
