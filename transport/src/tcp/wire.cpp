// The TCP mesh's handshake records and message headers (wire.hpp).
#include "wire.hpp"

#include <vector>

#include <fmt/format.h>

#include <collie/crypto.hpp>

namespace collie::transport::tcp::wire {

seal::SessionKeys handshake_keys(std::string_view token,
                                 std::span<const std::uint8_t, kChallengeBytes> challenge,
                                 std::span<const std::uint8_t> hello_before_proof,
                                 const seal::Key* shared) {
  std::vector<std::uint8_t> transcript(challenge.begin(), challenge.end());
  transcript.insert(transcript.end(), hello_before_proof.begin(), hello_before_proof.end());
  return seal::derive(token, "collie-peer v2",
                      shared != nullptr ? std::span<const std::uint8_t>(*shared)
                                        : std::span<const std::uint8_t>(),
                      transcript);
}

Nonce random_nonce() {
  Nonce nonce{};
  crypto::random_bytes(nonce);
  return nonce;
}

}  // namespace collie::transport::tcp::wire
