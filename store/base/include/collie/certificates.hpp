// Certificates for the sealed wire (docs/security.md, "Certificates"): for
// sites that run a certificate authority, a host proves who it is with a
// certificate the authority signed for its name, instead of (or beside)
// the job's secret.
//
// In a handshake each side sends a certificate proof: its certificate (and
// any intermediate ones) and its signature, made with the certificate's
// private key, over the handshake's transcript, which holds both sides'
// ephemeral X25519 keys. The other side checks that the chain leads to an
// authority it trusts, that the certificate names the host it reached (or
// the address it was reached from), that it is valid now, and that the
// signature is right: a man in the middle has no key to sign with, and a
// proof recorded from another handshake signs another transcript.
//
// A proof on the wire:
//   certificates u8 (1 to kMaxChain), then each: length u16, DER;
//   signature length u16, signature
// at most kMaxProofBytes in all, sent after its own length (u16,
// framed_proof(), proof_length()). Thread-safe once loaded.
//
// The mesh's handshake (transport/src/tcp: connector.cpp, listener.cpp)
// and the store's (store/src: client_handshake.cpp,
// server/session_handshake.cpp) use it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace collie::seal {

inline constexpr std::size_t kMaxProofBytes = 16 * 1024;
inline constexpr std::size_t kMaxChain = 4;
inline constexpr std::size_t kProofLengthBytes = 2;

// A proof as a handshake sends it: its length (u16, little-endian), then it.
std::vector<std::uint8_t> framed_proof(std::span<const std::uint8_t> proof);

// What a proof's length prefix says: `bytes`, or (1 to kMaxProofBytes
// being allowed) `problem` in words, "its certificate proof says it holds
// 0 bytes (1 to 16384 may)", for the caller to say whose proof it was.
struct ProofLength {
  std::size_t bytes = 0;
  std::string problem;
};
ProofLength proof_length(std::span<const std::uint8_t, kProofLengthBytes> prefix);

class Certificates {
 public:
  // Loads this host's certificate (`cert_file`, PEM: its certificate, then
  // any intermediate ones), its private key (`key_file`, PEM; may be the
  // same file) and the authorities it trusts (`ca_file`, PEM). Throws
  // collie::Error naming the file and what is wrong with it: unreadable,
  // no certificate or key in it, a key that is not the certificate's, a
  // certificate its own authorities do not accept.
  static std::shared_ptr<const Certificates> load(const std::string& cert_file,
                                                  const std::string& key_file,
                                                  const std::string& ca_file);
  // The three settings (COLLIE_SEAL_CERT, COLLIE_SEAL_KEY, COLLIE_SEAL_CA)
  // as given, empty where unset: none set is none (nullptr); otherwise
  // load(), the key from the certificate's file unless given, and loaded
  // once per set of files in a process (a launcher makes many clients, a
  // job many groups). Throws collie::Error with settings_problem()'s words
  // if they do not go together.
  static std::shared_ptr<const Certificates> from_settings(const std::string& cert,
                                                           const std::string& key,
                                                           const std::string& ca);
  // What is wrong with the three settings together (the certificate and
  // the authorities go together; a key needs a certificate), or empty.
  static std::string settings_problem(const std::string& cert, const std::string& key,
                                      const std::string& ca);
  ~Certificates();
  Certificates(const Certificates&) = delete;
  Certificates& operator=(const Certificates&) = delete;

  // This side's proof for a handshake whose transcript is `transcript`.
  // Throws collie::Error if signing fails.
  std::vector<std::uint8_t> prove(std::span<const std::uint8_t> transcript) const;

  // Checks a peer's proof for `transcript`: empty if its chain leads to a
  // trusted authority, its certificate names `host` (an IP address, or a
  // DNS name) and is valid now, and it signed the transcript; otherwise
  // what was wrong, in words.
  std::string check(std::span<const std::uint8_t> proof, std::span<const std::uint8_t> transcript,
                    const std::string& host) const;

  // "CN=node3.example (from /etc/collie/node3.pem)", for messages.
  const std::string& describe() const { return description_; }

 private:
  struct Impl;
  explicit Certificates(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::string description_;
};

}  // namespace collie::seal
