// The cryptography collie's handshakes share: the system's random generator
// and HMAC-SHA256 (OpenSSL's libcrypto underneath, linked privately).
//
// The store's client handshake (store/PROTOCOL.md) and the peer handshake of
// the TCP transport (docs/transport.md) both prove knowledge of a token
// without sending it: each side answers a fresh random nonce with an HMAC of
// it. Each builds its own message (label, nonces, ranks); this header gives
// them the primitives. Thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace collie::crypto {

inline constexpr std::size_t kDigestBytes = 32;
using Digest = std::array<std::uint8_t, kDigestBytes>;

// Fills `out` from the system's cryptographic random generator. Throws
// collie::Error if the generator fails.
void random_bytes(std::span<std::uint8_t> out);

// A random 64-bit number from the same generator (group ids).
std::uint64_t random_u64();

// HMAC-SHA256(key, message). Throws collie::Error if OpenSSL fails.
Digest hmac_sha256(std::string_view key, std::span<const std::uint8_t> message);

// Whether two digests are equal, in time that does not depend on where
// they differ (a proof check must not leak how much of a guess was right).
bool digests_equal(const Digest& a, const Digest& b);

}  // namespace collie::crypto
