// HMAC-SHA256, constant-time comparison and random bytes, from OpenSSL's
// libcrypto (crypto.hpp).
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <collie/crypto.hpp>
#include <collie/error.hpp>

namespace collie::crypto {

void random_bytes(std::span<std::uint8_t> out) {
  if (RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    throw Error("the system random generator failed (OpenSSL RAND_bytes)");
  }
}

std::uint64_t random_u64() {
  std::array<std::uint8_t, 8> bytes{};
  random_bytes(bytes);
  std::uint64_t v = 0;
  for (const auto b : bytes)
    v = (v << 8) | b;
  return v;
}

Digest hmac_sha256(std::string_view key, std::span<const std::uint8_t> message) {
  Digest digest{};
  unsigned int length = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), message.data(), message.size(),
           digest.data(), &length) == nullptr ||
      length != digest.size()) {
    throw Error("HMAC-SHA256 failed (OpenSSL)");
  }
  return digest;
}

bool digests_equal(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace collie::crypto
