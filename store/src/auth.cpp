// The store handshake's proofs of the shared token (auth.hpp).
#include "auth.hpp"

#include <vector>

#include <collie/crypto.hpp>

namespace collie::store::auth {

wire::Nonce random_nonce() {
  wire::Nonce nonce{};
  crypto::random_bytes(nonce);
  return nonce;
}

namespace {

wire::Proof hmac(std::string_view token, std::string_view label, const wire::Nonce& first,
                 const wire::Nonce& second) {
  std::vector<unsigned char> message(label.begin(), label.end());
  message.insert(message.end(), first.begin(), first.end());
  message.insert(message.end(), second.begin(), second.end());
  return crypto::hmac_sha256(token, message);
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

}  // namespace collie::store::auth
