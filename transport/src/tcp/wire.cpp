// The TCP mesh's handshake records and message headers (wire.hpp).
#include "wire.hpp"

#include <cstring>
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

std::vector<std::uint8_t> certificate_transcript(
    std::span<const std::uint8_t, kChallengeBytes> challenge,
    std::span<const std::uint8_t, kHelloBytes> hello, std::span<const std::uint8_t> connector) {
  std::vector<std::uint8_t> t(kChallengeBytes + kHelloBytes + connector.size());
  std::memcpy(t.data(), challenge.data(), kChallengeBytes);
  std::memcpy(t.data() + kChallengeBytes, hello.data(), kHelloBytes);
  if (!connector.empty())
    std::memcpy(t.data() + kChallengeBytes + kHelloBytes, connector.data(), connector.size());
  return t;
}

Nonce random_nonce() {
  Nonce nonce{};
  crypto::random_bytes(nonce);
  return nonce;
}

}  // namespace collie::transport::tcp::wire
