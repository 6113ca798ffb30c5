// Shared-secret authentication, and the keys of a sealed connection, for
// the store handshake.
//
// Both sides prove they know the token without sending it: the proofs come
// from seal::derive (HKDF-SHA256 keyed by the token, labelled "collie-store
// v3") over the whole handshake, the client's hello and the server's with
// its proof zeroed, each carrying a fresh nonce, so that a proof is valid
// for one connection and one direction only. A connection that is sealed
// adds the X25519 secret of the two hellos' public keys, and takes its
// records' keys from the same derivation. See store/PROTOCOL.md. The
// primitives are the base layer's (<collie/crypto.hpp>, <collie/seal.hpp>).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include <collie/seal.hpp>

#include "protocol.hpp"

namespace collie::store::auth {

// A fresh nonce from the system's cryptographic random generator.
wire::Nonce random_nonce();

// The proofs (the server's: acceptor_proof; the client's: connector_proof)
// and the records' keys of a handshake: `client_hello` and `server_hello`
// as encoded (the latter's proof is zeroed here), `shared` the X25519
// secret when the connection is sealed, else null.
seal::SessionKeys handshake_keys(std::string_view token,
                                 std::span<const std::uint8_t, wire::kClientHelloBytes> client_hello,
                                 std::span<const std::uint8_t, wire::kServerHelloBytes> server_hello,
                                 const seal::Key* shared);

// What the certificate proofs sign (collie/certificates.hpp): both hellos
// as sent (the server's with its proof); the store's proof signs the
// client's certificate proof after them too.
std::vector<std::uint8_t> certificate_transcript(
    std::span<const std::uint8_t, wire::kClientHelloBytes> client_hello,
    std::span<const std::uint8_t, wire::kServerHelloBytes> server_hello);

// Whether a side seals the connection: it has a token (the records' keys
// need one) and its setting asks for it with a peer on this host or not.
inline bool wants_seal(bool has_token, seal::Mode mode, bool same_host) {
  return has_token && seal::seals_connection(mode, same_host);
}

// A connection is sealed when either side asks (a client behind a relay on
// its own host does not know that the store is elsewhere; the store does),
// and refused (AuthStatus::SealingDiffers) when the other side's setting
// is off, naming both.
inline bool sealed(std::uint16_t client, std::uint16_t server) {
  return seal::seals(client) || seal::seals(server);
}
inline bool sealing_differs(std::uint16_t client, std::uint16_t server) {
  return sealed(client, server) && (seal::mode_of_field(client) == seal::Mode::Off ||
                                    seal::mode_of_field(server) == seal::Mode::Off);
}

}  // namespace collie::store::auth
