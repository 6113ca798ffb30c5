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

std::string describe_sealing(std::uint16_t field) {
  const auto mode = seal_mode(field);
  const char* word = mode == SealMode::On ? "on" : mode == SealMode::Off ? "off" : "auto";
  const char* why = mode == SealMode::On    ? "every connection"
                    : mode == SealMode::Off ? "no connection"
                    : seals(field)          ? "between hosts, and this one is"
                                            : "between hosts, and this one is not";
  return fmt::format("{} (COLLIE_SEAL={}: {})", seals(field) ? "seals it" : "leaves it clear",
                     word, why);
}

SealMode seal_mode_of(std::string_view word) {
  if (word == "on") return SealMode::On;
  if (word == "off") return SealMode::Off;
  return SealMode::Auto;
}

Nonce random_nonce() {
  Nonce nonce{};
  crypto::random_bytes(nonce);
  return nonce;
}

}  // namespace collie::transport::tcp::wire
