// Shared-secret authentication for the store handshake.
//
// Both sides prove they know the token without sending it: each sends a
// fresh random nonce, and each answers with HMAC-SHA256(token, label ||
// nonces), with a different label per direction so that one side's proof can
// never be replayed as the other's. See store/PROTOCOL.md. The primitives
// (random bytes, HMAC, constant-time comparison) are the base layer's
// (<collie/crypto.hpp>).
#pragma once

#include <string_view>

#include "protocol.hpp"

namespace collie::store::auth {

// A fresh nonce from the system's cryptographic random generator.
wire::Nonce random_nonce();

// What the server sends to prove it knows the token.
wire::Proof server_proof(std::string_view token, const wire::Nonce& client_nonce,
                         const wire::Nonce& server_nonce);

// What the client sends to prove it knows the token.
wire::Proof client_proof(std::string_view token, const wire::Nonce& client_nonce,
                         const wire::Nonce& server_nonce);

}  // namespace collie::store::auth
