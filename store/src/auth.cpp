// The store handshake's proofs and keys (auth.hpp).
#include "auth.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include <collie/crypto.hpp>

namespace collie::store::auth {

wire::Nonce random_nonce() {
  wire::Nonce nonce{};
  crypto::random_bytes(nonce);
  return nonce;
}

seal::SessionKeys handshake_keys(std::string_view token,
                                 std::span<const std::uint8_t, wire::kClientHelloBytes> client_hello,
                                 std::span<const std::uint8_t, wire::kServerHelloBytes> server_hello,
                                 const seal::Key* shared) {
  std::vector<std::uint8_t> transcript(client_hello.begin(), client_hello.end());
  transcript.insert(transcript.end(), server_hello.begin(), server_hello.end());
  auto proof = transcript.begin() + static_cast<long>(wire::kClientHelloBytes + wire::kServerProofAt);
  std::fill(proof, proof + static_cast<long>(wire::kProofBytes), std::uint8_t{0});
  return seal::derive(token, "collie-store v3",
                      shared != nullptr ? std::span<const std::uint8_t>(*shared)
                                        : std::span<const std::uint8_t>(),
                      transcript);
}

std::vector<std::uint8_t> certificate_transcript(
    std::span<const std::uint8_t, wire::kClientHelloBytes> client_hello,
    std::span<const std::uint8_t, wire::kServerHelloBytes> server_hello) {
  std::vector<std::uint8_t> t(wire::kClientHelloBytes + wire::kServerHelloBytes);
  std::memcpy(t.data(), client_hello.data(), wire::kClientHelloBytes);
  std::memcpy(t.data() + wire::kClientHelloBytes, server_hello.data(), wire::kServerHelloBytes);
  return t;
}

}  // namespace collie::store::auth
