// The TCP mesh's handshake records and message headers (wire.hpp).
#include "wire.hpp"

#include <collie/crypto.hpp>

namespace collie::transport::tcp::wire {

Proof peer_proof(std::string_view token, const Nonce& nonce, std::uint64_t group_id,
                 std::uint32_t from, std::uint32_t to) {
  constexpr std::string_view kLabel = "collie-peer v1";
  std::array<std::uint8_t, kLabel.size() + kNonceBytes + 16> message{};
  std::memcpy(message.data(), kLabel.data(), kLabel.size());
  std::memcpy(message.data() + kLabel.size(), nonce.data(), kNonceBytes);
  put64(message.data() + kLabel.size() + kNonceBytes, group_id);
  put32(message.data() + kLabel.size() + kNonceBytes + 8, from);
  put32(message.data() + kLabel.size() + kNonceBytes + 12, to);
  return crypto::hmac_sha256(token, message);
}

Nonce random_nonce() {
  Nonce nonce{};
  crypto::random_bytes(nonce);
  return nonce;
}

}  // namespace collie::transport::tcp::wire
