// A hello to a rank's mesh port, made by hand (a stranger's, or an
// insider's): for tests of what the listener refuses. Needs transport/src on
// the include path.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "support/raw_connection.hpp"
#include "tcp/wire.hpp"

namespace collie::test {

struct MeshAnswer {
  transport::tcp::wire::Verdict verdict;
  std::string reason;  // what the rank told the peer
};

// Reads the rank's challenge on `raw`, sends a hello from rank `from` to rank
// `to` of group `group` (of `world` ranks) proved with `token`, and returns
// the rank's answer; nullopt if it gave none within `timeout`.
inline std::optional<MeshAnswer> send_mesh_hello(RawConnection& raw, std::uint64_t group,
                                                 std::uint32_t from, std::uint32_t to,
                                                 std::uint32_t world, const std::string& token,
                                                 std::chrono::milliseconds timeout) {
  namespace wire = transport::tcp::wire;
  const auto challenge = raw.read_exactly(wire::kChallengeBytes, timeout);
  if (!challenge) return std::nullopt;
  wire::Nonce nonce{};
  std::copy_n(challenge->begin() + 12, wire::kNonceBytes, nonce.begin());
  wire::Hello hello;
  hello.version = wire::kProtocolVersion;
  hello.group_id = group;
  hello.from = from;
  hello.to = to;
  hello.world_size = world;
  hello.proof = wire::peer_proof(token, nonce, group, from, to);
  std::vector<std::uint8_t> out(wire::kHelloBytes);
  wire::encode(hello, out.data());
  raw.send(out);
  const auto verdict = raw.read_exactly(wire::kVerdictBytes, timeout);
  if (!verdict) return std::nullopt;
  MeshAnswer answer{static_cast<wire::Verdict>((*verdict)[0]), {}};
  if (const auto length = wire::get16(verdict->data() + 2); length > 0) {
    const auto reason = raw.read_exactly(length, timeout);
    if (!reason) return std::nullopt;
    answer.reason.assign(reason->begin(), reason->end());
  }
  return answer;
}

}  // namespace collie::test
