// Shared-secret authentication for the store handshake.
//
// Both sides prove they know the token without sending it: each sends a
// fresh random nonce, and each answers with HMAC-SHA256(token, label ||
// nonces), with a different label per direction so that one side's proof can
// never be replayed as the other's. See store/PROTOCOL.md.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "protocol.hpp"

namespace collie::store::auth {

// Bytes from the system's cryptographic random generator. Throws
// collie::Error if it fails. (Also used by transport/ for its handshake.)
void random_bytes(std::span<std::uint8_t> out);

// HMAC-SHA256(key, message). (Also used by transport/ for its handshake.)
wire::Proof hmac_sha256(std::string_view key, std::span<const std::uint8_t> message);

// A fresh nonce from the system's cryptographic random generator.
wire::Nonce random_nonce();

// What the server sends to prove it knows the token.
wire::Proof server_proof(std::string_view token, const wire::Nonce& client_nonce,
                         const wire::Nonce& server_nonce);

// What the client sends to prove it knows the token.
wire::Proof client_proof(std::string_view token, const wire::Nonce& client_nonce,
                         const wire::Nonce& server_nonce);

// Compares two proofs in constant time.
bool proofs_equal(const wire::Proof& a, const wire::Proof& b);

}  // namespace collie::store::auth
