// The sealed wire (docs/security.md, "The sealed wire"): the key exchange
// and the records that encrypt and authenticate a connection, from
// OpenSSL's libcrypto (linked privately).
//
// A handshake keys a connection: each side makes an ephemeral X25519 key
// pair (KeyExchange), the two public keys cross inside the handshake, and
// derive() mixes their shared secret with the job's secret and the whole
// transcript into two proofs (one per side: who knows the job's secret and
// saw the same handshake) and two keys (one per direction). The ephemeral
// keys are forgotten when the handshake ends, so a secret that leaks later
// opens no recorded connection (forward secrecy).
//
// Then the stream is a sequence of records, each
//   length u32 (little-endian, 1 to kMaxRecordBytes), ciphertext, tag (16)
// sealed with AES-256-GCM under the direction's key; the nonce is the
// record's number in its direction (never sent), and the length is
// authenticated with it. A record changed, forged, cut, replayed, dropped
// or reordered fails its tag: Opener::open() says so, and the caller fails
// the connection, having handed nothing of it to anyone.
//
// Not thread-safe: one Sealer or Opener per direction of a connection,
// used by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <collie/crypto.hpp>

typedef struct evp_pkey_st EVP_PKEY;
typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace collie::seal {

inline constexpr std::size_t kPublicKeyBytes = 32;
inline constexpr std::size_t kKeyBytes = 32;
inline constexpr std::size_t kLengthBytes = 4;
inline constexpr std::size_t kTagBytes = 16;
inline constexpr std::size_t kOverheadBytes = kLengthBytes + kTagBytes;
// The most plaintext one record carries: large enough that a record's fixed
// costs (a nonce, a tag, a call) vanish beside its bytes, small enough that
// a receiver holds a few whole ones in a buffer of a few hundred KiB.
inline constexpr std::size_t kMaxRecordBytes = 64 * 1024;

// The bytes `plain` bytes take as records (Sealer::seal_records).
constexpr std::size_t sealed_size(std::size_t plain) {
  return plain + (plain + kMaxRecordBytes - 1) / kMaxRecordBytes * kOverheadBytes;
}

using PublicKey = std::array<std::uint8_t, kPublicKeyBytes>;
using Key = std::array<std::uint8_t, kKeyBytes>;

// An ephemeral X25519 key pair. Throws collie::Error if OpenSSL fails.
class KeyExchange {
 public:
  KeyExchange();
  ~KeyExchange();
  KeyExchange(const KeyExchange&) = delete;
  KeyExchange& operator=(const KeyExchange&) = delete;

  const PublicKey& public_key() const { return public_; }
  // The secret shared with the holder of `peer`'s private key. Throws
  // collie::Error if `peer` is not a valid public key (all zeros, say).
  Key shared(const PublicKey& peer) const;

 private:
  EVP_PKEY* key_ = nullptr;
  PublicKey public_{};
};

// What a handshake yields: a proof for each side and a key for each
// direction ("c" the side that connected, "a" the side that accepted).
struct SessionKeys {
  crypto::Digest connector_proof{};
  crypto::Digest acceptor_proof{};
  Key connector_to_acceptor{};
  Key acceptor_to_connector{};
};

// HKDF-SHA256 (RFC 5869): extract with the salt HMAC(secret, label), from
// the input `shared` (the X25519 secret; empty for a connection left in
// the clear, whose keys then serve only the proofs) followed by
// SHA-256(transcript); expanded once for each of the four outputs, by name.
// `label` tells the protocols apart ("collie-peer v2", "collie-store v2"):
// no proof or key of one is ever valid in another.
SessionKeys derive(std::string_view secret, std::string_view label,
                   std::span<const std::uint8_t> shared, std::span<const std::uint8_t> transcript);

// The setting (COLLIE_SEAL) and the decision: a side seals a connection
// when its setting is On, or Auto and the peer is on another host; both
// sides decide, and a connection they decide differently is refused.
enum class Mode : std::uint8_t { Auto = 0, On = 1, Off = 2 };
// COLLIE_SEAL's word ("auto", "on", "off") as a mode; Auto for another.
Mode mode_of(std::string_view word);
inline bool seals_connection(Mode mode, bool same_host) {
  return mode == Mode::On || (mode == Mode::Auto && !same_host);
}
// Whether a connected socket's peer is a process of this host: its address
// is a loopback address, or the socket's own (the kernel routes a
// connection to one of the host's own addresses from that address). Both
// ends of a connection answer alike. False if the socket has no peer.
bool same_host(int fd);
// The sealing field of a handshake (the mesh's and the store's): whether
// this side seals this connection (bit 0), and its setting (bits 4-5), so
// that a refusal can name both sides' settings.
// Bit 1: this side proves itself with a certificate on the connections it
// seals (collie/certificates.hpp; the mesh's handshake).
inline constexpr std::uint16_t kSealsThis = 1;
inline constexpr std::uint16_t kCertified = 2;
inline std::uint16_t sealing_field(bool seals, Mode mode, bool certified = false) {
  return static_cast<std::uint16_t>((seals ? kSealsThis : 0) | (certified ? kCertified : 0) |
                                    (static_cast<unsigned>(mode) << 4));
}
inline bool seals(std::uint16_t field) { return (field & kSealsThis) != 0; }
inline bool certified(std::uint16_t field) { return (field & kCertified) != 0; }
// "proves itself with a certificate", or "has none (...)", for refusals.
inline const char* describe_certified(std::uint16_t field) {
  return certified(field) ? "proves itself with a certificate"
                          : "has none (COLLIE_SEAL_CERT is not set there)";
}
inline Mode mode_of_field(std::uint16_t field) {
  const auto m = (field >> 4) & 3;
  return m <= 2 ? static_cast<Mode>(m) : Mode::Auto;
}
// "seals it (COLLIE_SEAL=auto: between hosts, and this one is)", for
// refusals.
std::string describe_sealing(std::uint16_t field);

// Seals one direction's records.
class Sealer {
 public:
  explicit Sealer(const Key& key);
  ~Sealer();
  Sealer(const Sealer&) = delete;
  Sealer& operator=(const Sealer&) = delete;

  // Seals the concatenation of `pieces` (1 to kMaxRecordBytes bytes in all)
  // as the next record, into `out` (room for their size + kOverheadBytes).
  // Throws collie::Error if OpenSSL fails, or past 2^64 - 1 records.
  void seal(std::span<const std::span<const std::byte>> pieces, std::uint8_t* out);
  // Seals the first `bytes` bytes of the concatenation of `pieces` as
  // records of kMaxRecordBytes (the last one shorter), one after another
  // into `out` (room for sealed_size(bytes)); returns their size.
  std::size_t seal_records(std::span<const std::span<const std::byte>> pieces, std::size_t bytes,
                           std::uint8_t* out);
  std::uint64_t records() const { return sequence_; }

 private:
  EVP_CIPHER_CTX* ctx_ = nullptr;
  std::uint64_t sequence_ = 0;
};

// Opens the other direction's records, in order.
class Opener {
 public:
  explicit Opener(const Key& key);
  ~Opener();
  Opener(const Opener&) = delete;
  Opener& operator=(const Opener&) = delete;

  // The plaintext length a record announces in its first kLengthBytes;
  // whether it is one a sender may use is the caller's check (1 to
  // kMaxRecordBytes).
  static std::size_t announced(const std::uint8_t* record);
  // Opens the next record (`record`: its length field, `n` bytes of
  // ciphertext and its tag) into `out` (n bytes; may be record +
  // kLengthBytes: opened in place). False if it fails authentication: then
  // `out` holds bytes nobody may use, and the stream is beyond repair.
  bool open(const std::uint8_t* record, std::size_t n, std::uint8_t* out);
  std::uint64_t records() const { return sequence_; }

 private:
  EVP_CIPHER_CTX* ctx_ = nullptr;
  std::uint64_t sequence_ = 0;
};

}  // namespace collie::seal
