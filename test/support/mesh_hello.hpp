// A hello to a rank's mesh port, made by hand (a stranger's, or an
// insider's): for tests of what the listener refuses. Needs transport/src on
// the include path.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <collie/seal.hpp>

#include "support/raw_connection.hpp"
#include "tcp/wire.hpp"

namespace collie::test {

struct MeshAnswer {
  transport::tcp::wire::Verdict verdict;
  std::string reason;  // what the rank told the peer
  bool proved = false;  // the acceptor's proof came with it, and it is right
};

// Reads the rank's challenge on `raw`, sends a hello from rank `from` to rank
// `to` of group `group` (of `world` ranks) proved with `token` (sealed, with
// a key exchange, when the challenge says the rank seals it, unless
// `sealing` says what to claim), and returns the rank's answer; nullopt if
// it gave none within `timeout`.
inline std::optional<MeshAnswer> send_mesh_hello(RawConnection& raw, std::uint64_t group,
                                                 std::uint32_t from, std::uint32_t to,
                                                 std::uint32_t world, const std::string& token,
                                                 std::chrono::milliseconds timeout,
                                                 std::optional<std::uint16_t> sealing = {}) {
  namespace wire = transport::tcp::wire;
  const auto challenge_bytes = raw.read_exactly(wire::kChallengeBytes, timeout);
  if (!challenge_bytes) return std::nullopt;
  std::array<std::uint8_t, wire::kChallengeBytes> challenge{};
  std::copy_n(challenge_bytes->begin(), wire::kChallengeBytes, challenge.begin());
  const auto theirs = wire::decode_challenge(challenge.data());
  wire::Hello hello;
  hello.version = wire::kProtocolVersion;
  hello.sealing = sealing.value_or(theirs.sealing);
  hello.group_id = group;
  hello.from = from;
  hello.to = to;
  hello.world_size = world;
  const bool both_seal = seal::seals(hello.sealing) && seal::seals(theirs.sealing);
  seal::KeyExchange exchange;
  seal::Key shared{};
  if (both_seal) {
    hello.key = exchange.public_key();
    shared = exchange.shared(theirs.key);
  }
  std::vector<std::uint8_t> out(wire::kHelloBytes);
  wire::encode(hello, out.data());
  const auto keys = wire::handshake_keys(
      token, challenge, std::span(out.data(), wire::kHelloProofAt),
      both_seal ? &shared : nullptr);
  hello.proof = keys.connector_proof;
  wire::encode(hello, out.data());
  raw.send(out);
  const auto verdict = raw.read_exactly(wire::kVerdictBytes, timeout);
  if (!verdict) return std::nullopt;
  MeshAnswer answer{static_cast<wire::Verdict>((*verdict)[0]), {}};
  if (((*verdict)[1] & wire::kVerdictProof) != 0) {
    const auto proof = raw.read_exactly(wire::kProofBytes, timeout);
    if (!proof) return std::nullopt;
    answer.proved = std::equal(proof->begin(), proof->end(), keys.acceptor_proof.begin());
  }
  if (const auto length = wire::get16(verdict->data() + 2); length > 0) {
    const auto reason = raw.read_exactly(length, timeout);
    if (!reason) return std::nullopt;
    answer.reason.assign(reason->begin(), reason->end());
  }
  return answer;
}

}  // namespace collie::test
