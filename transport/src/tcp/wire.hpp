// The TCP transport's wire format: handshake records and message headers.
// Integers are little-endian. See docs/transport.md for the full description.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <span>
#include <string>

#include <collie/crypto.hpp>
#include <collie/seal.hpp>

namespace collie::transport::tcp::wire {

// 3: a hello names its lane (lanes.hpp), and a message may be striped
// over the lanes (kStriped). 4: a striped message may ask to be
// confirmed whole (kConfirm), and the answer is a header of its own (kWhole).
inline constexpr std::uint16_t kProtocolVersion = 4;

inline constexpr std::array<std::uint8_t, 4> kMagic = {'C', 'L', 'P', 'M'};
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kPublicKeyBytes = seal::kPublicKeyBytes;
inline constexpr std::size_t kProofBytes = crypto::kDigestBytes;
// challenge: magic, version u16, sealing u16, acceptor rank u32, nonce,
// X25519 public key (zeros when the acceptor does not seal)
inline constexpr std::size_t kChallengeBytes = 4 + 2 + 2 + 4 + kNonceBytes + kPublicKeyBytes;
// hello: magic, version u16, sealing u16, group id u64, from u32, to u32,
// world size u32, lane u16 (0: the pair's connection; k > 0: the
// connector's sending lane k, lanes.hpp), reserved u16 (0), X25519 public
// key (zeros when unsealed), proof
inline constexpr std::size_t kHelloBytes =
    4 + 2 + 2 + 8 + 4 + 4 + 4 + 2 + 2 + kPublicKeyBytes + kProofBytes;
// The most sending lanes a rank opens to one peer.
inline constexpr std::uint16_t kMaxLanes = 16;
// verdict: code u8, flags u8 (kVerdictProof: the acceptor's proof follows),
// reason length u16, [proof], then the reason (UTF-8), [certificate proof]
inline constexpr std::size_t kVerdictBytes = 4;
inline constexpr std::uint8_t kVerdictProof = 1;
// ... kVerdictCertificate: the acceptor's certificate proof (length u16,
// then the proof) follows the reason: both sides prove themselves with
// certificates (collie/certificates.hpp). The connector's follows its
// hello, when both hellos' sealing fields say so (seal::kCertified).
inline constexpr std::uint8_t kVerdictCertificate = 2;
inline constexpr std::size_t kMaxReasonBytes = 1024;
// message header: tag u64, sequence u64, length u64, fingerprint u64;
// the length's top bit (kStriped) says the payload does not follow on this
// connection but comes in chunks over the sender's lanes (lanes.hpp)
inline constexpr std::size_t kHeaderBytes = 32;
inline constexpr std::uint64_t kStriped = std::uint64_t{1} << 63;
// A striped message's length may also carry kConfirm: the receiver answers
// when it is whole with a header whose length is kWhole (no payload, tag
// 0, the message's sequence number in the fingerprint's place), and the
// sender keeps the send until then, to send again what a lost lane carried
// (lane_failover.cpp). The length's other bits are the payload's bytes.
inline constexpr std::uint64_t kConfirm = std::uint64_t{1} << 62;
inline constexpr std::uint64_t kWhole = std::uint64_t{1} << 61;
inline constexpr std::uint64_t kLengthFlags = kStriped | kConfirm | kWhole;
// a lane's chunk frame: message sequence u64, offset u64, length u32,
// reserved u32 (0); the chunk's bytes follow
inline constexpr std::size_t kFrameBytes = 24;

// The challenge's and hello's sealing field: seal::sealing_field.

enum class Verdict : std::uint8_t { Accepted = 0, Duplicate = 1, Refused = 2 };

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Proof = crypto::Digest;  // HMAC-SHA256

inline void put16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
inline void put32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
inline void put64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
inline std::uint16_t get16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
inline std::uint32_t get32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}
inline std::uint64_t get64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i)
    v = (v << 8) | p[i];
  return v;
}

struct Header {
  std::uint64_t tag = 0;
  std::uint64_t sequence = 0;
  std::uint64_t length = 0;
  std::uint64_t fingerprint = 0;
};

inline void encode(const Header& h, std::uint8_t* out) {
  put64(out, h.tag);
  put64(out + 8, h.sequence);
  put64(out + 16, h.length);
  put64(out + 24, h.fingerprint);
}
inline Header decode_header(const std::uint8_t* in) {
  return Header{get64(in), get64(in + 8), get64(in + 16), get64(in + 24)};
}

struct Challenge {
  std::uint16_t version = 0;
  std::uint16_t sealing = 0;
  std::uint32_t rank = 0;  // the acceptor's
  Nonce nonce{};
  seal::PublicKey key{};
};

inline void encode(const Challenge& c, std::uint8_t* out) {
  std::memcpy(out, kMagic.data(), 4);
  put16(out + 4, c.version);
  put16(out + 6, c.sealing);
  put32(out + 8, c.rank);
  std::memcpy(out + 12, c.nonce.data(), kNonceBytes);
  std::memcpy(out + 12 + kNonceBytes, c.key.data(), kPublicKeyBytes);
}
inline Challenge decode_challenge(const std::uint8_t* in) {
  Challenge c;
  c.version = get16(in + 4);
  c.sealing = get16(in + 6);
  c.rank = get32(in + 8);
  std::memcpy(c.nonce.data(), in + 12, kNonceBytes);
  std::memcpy(c.key.data(), in + 12 + kNonceBytes, kPublicKeyBytes);
  return c;
}

struct Hello {
  std::uint16_t version = 0;
  std::uint16_t sealing = 0;
  std::uint64_t group_id = 0;
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  std::uint32_t world_size = 0;
  std::uint16_t lane = 0;
  seal::PublicKey key{};
  Proof proof{};
};

// Where a hello's proof begins: the bytes before it are what it proves.
inline constexpr std::size_t kHelloProofAt = kHelloBytes - kProofBytes;

inline void encode(const Hello& h, std::uint8_t* out) {
  std::memcpy(out, kMagic.data(), 4);
  put16(out + 4, h.version);
  put16(out + 6, h.sealing);
  put64(out + 8, h.group_id);
  put32(out + 16, h.from);
  put32(out + 20, h.to);
  put32(out + 24, h.world_size);
  put16(out + 28, h.lane);
  put16(out + 30, 0);
  std::memcpy(out + 32, h.key.data(), kPublicKeyBytes);
  std::memcpy(out + kHelloProofAt, h.proof.data(), kProofBytes);
}
inline Hello decode_hello(const std::uint8_t* in) {
  Hello h;
  h.version = get16(in + 4);
  h.sealing = get16(in + 6);
  h.group_id = get64(in + 8);
  h.from = get32(in + 16);
  h.to = get32(in + 20);
  h.world_size = get32(in + 24);
  h.lane = get16(in + 28);
  std::memcpy(h.key.data(), in + 32, kPublicKeyBytes);
  std::memcpy(h.proof.data(), in + kHelloProofAt, kProofBytes);
  return h;
}

struct Frame {
  std::uint64_t sequence = 0;
  std::uint64_t offset = 0;
  std::uint32_t length = 0;
};

inline void encode(const Frame& f, std::uint8_t* out) {
  put64(out, f.sequence);
  put64(out + 8, f.offset);
  put32(out + 16, f.length);
  put32(out + 20, 0);
}
inline Frame decode_frame(const std::uint8_t* in) {
  return Frame{get64(in), get64(in + 8), get32(in + 16)};
}

inline bool has_magic(const std::uint8_t* in) {
  return std::memcmp(in, kMagic.data(), 4) == 0;
}

// The proofs and keys of one handshake (seal::derive, labelled
// "collie-peer v2"): from the token, the X25519 secret (`shared`; empty for
// a connection in the clear), and the transcript: the challenge's bytes
// and the hello's up to its proof. The connector proves itself in the
// hello, the acceptor in its verdict; a connection sealed uses the keys.
seal::SessionKeys handshake_keys(std::string_view token,
                                 std::span<const std::uint8_t, kChallengeBytes> challenge,
                                 std::span<const std::uint8_t> hello_before_proof,
                                 const seal::Key* shared);
// What the certificate proofs sign (collie/certificates.hpp): the
// challenge and the whole hello (the connector's), and then the
// connector's certificate proof too (the acceptor's).
std::vector<std::uint8_t> certificate_transcript(
    std::span<const std::uint8_t, kChallengeBytes> challenge,
    std::span<const std::uint8_t, kHelloBytes> hello,
    std::span<const std::uint8_t> connector = {});
Nonce random_nonce();

}  // namespace collie::transport::tcp::wire
