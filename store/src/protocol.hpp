// The store's wire protocol: constants, byte-order helpers, request and reply
// encoding, and the request parser the server runs on untrusted bytes.
// store/PROTOCOL.md is the specification; this file implements it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <collie/crypto.hpp>
#include <collie/seal.hpp>
#include <collie/store/store.hpp>

namespace collie::store::wire {

inline constexpr std::uint32_t kMagic = 0x434C5354;  // "CLST"
inline constexpr std::uint16_t kVersion = 3;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kProofBytes = crypto::kDigestBytes;
// A hello is the shape every version shares (its base: what a peer of
// another version reads to find the version), then, from version 3, its
// sealing field and X25519 public key (zeros when it does not seal).
inline constexpr std::size_t kClientHelloBaseBytes = 4 + 2 + 2 + kNonceBytes;
inline constexpr std::size_t kServerHelloBaseBytes =
    4 + 2 + 1 + 1 + 16 + 4 + kNonceBytes + kProofBytes;
inline constexpr std::size_t kSealingBytes = 2 + seal::kPublicKeyBytes;
inline constexpr std::size_t kClientHelloBytes = kClientHelloBaseBytes + kSealingBytes;
inline constexpr std::size_t kServerHelloBytes = kServerHelloBaseBytes + kSealingBytes;
// Where the server's proof lies in its hello (zeroed in the transcript).
inline constexpr std::size_t kServerProofAt = kServerHelloBaseBytes - kProofBytes;
inline constexpr std::size_t kFrameHeaderBytes = 4;
// Smallest limit a server may announce for a whole message: a reply with an
// error text must always fit.
inline constexpr std::uint32_t kMinMessageBytes = 4096;

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Proof = crypto::Digest;  // HMAC-SHA256

enum class Op : std::uint8_t {
  Set = 1,
  Get = 2,
  TryGet = 3,
  Add = 4,
  CompareSet = 5,
  Wait = 6,
  Check = 7,
  Delete = 8,
  CountKeys = 9,
  ListKeys = 10,
  MultiGet = 11,
  MultiSet = 12,
  Append = 13,
  Barrier = 14,
  Cancel = 15,
  Ping = 16,
  // The rest of this connection speaks torch's TCPStore protocol, as from a
  // torch client (after collie's handshake: a relay's tunnel, proven by the
  // token, for torch clients that cannot prove it themselves).
  Torch = 17,
};
std::string_view op_name(Op op);

// Every status but Ok is followed by the server closing the connection.
enum class HelloStatus : std::uint8_t {
  Ok = 0,
  UnsupportedVersion = 1,
  TooManyConnections = 2,  // the server holds its limit of connections
  TooManyFromAddress = 3,  // ... or its limit of connections from this address
};
// After anything but Ok the server closes the connection.
enum class AuthStatus : std::uint8_t {
  Ok = 0,
  Failed = 1,
  Throttled = 2,  // too many failed attempts from this address lately: not checked
  SealingDiffers = 3,  // proved, but one side would seal and the other not (COLLIE_SEAL)
  CertificatesDiffer = 4,  // sealed, and one side proves itself with a certificate, the other not
  CertificateRefused = 5,  // the client's certificate proof fails (the store's log says why)
};
enum class ReplyStatus : std::uint8_t { Ok = 0, Error = 1 };

// Codes carried by an error reply.
enum class ErrorCode : std::uint16_t {
  LimitExceeded = 1,    // a key, value, count or message over the server's limits
  NotAnInteger = 2,     // add() on a value that is not decimal int64 text
  Overflow = 3,         // add() would overflow int64
  BarrierMismatch = 4,  // barrier joined with a different n
  TooManyWaits = 5,     // too many blocked requests on one connection
  DuplicateId = 6,      // a blocked request with this id is already pending
  Malformed = 7,        // the request could not be parsed; the server closes the connection
  ShuttingDown = 8,     // the server is stopping
  InvalidArgument = 9,  // e.g. a barrier of n = 0
  StoreFull = 10,       // the server's memory limit: the request was not carried out
  Idle = 11,            // id 0: the server closes this idle connection (nothing was lost)
};

// --- byte order -------------------------------------------------------------

inline void put_u16(std::uint8_t* p, std::uint16_t v) {
  p[0] = static_cast<std::uint8_t>(v >> 8);
  p[1] = static_cast<std::uint8_t>(v);
}
inline void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    p[i] = static_cast<std::uint8_t>(v >> (24 - 8 * i));
}
inline std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>((p[0] << 8) | p[1]);
}
inline std::uint32_t get_u32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

// Appends big-endian fields to a byte vector.
class Writer {
 public:
  explicit Writer(std::vector<std::uint8_t>& out) : out_(out) {}
  void u8(std::uint8_t v) { out_.push_back(v); }
  void u16(std::uint16_t v);
  void u32(std::uint32_t v);
  void i64(std::int64_t v);
  void bytes(std::string_view s);  // u32 length, then the bytes
  void raw(std::span<const std::uint8_t> s) { out_.insert(out_.end(), s.begin(), s.end()); }

 private:
  std::vector<std::uint8_t>& out_;
};

// Reads big-endian fields from untrusted bytes. Every read checks the
// remaining length first; a short read marks the reader failed and returns
// zero/empty, so a parser checks ok() once at the end.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> in) : in_(in) {}
  std::uint8_t u8();
  std::uint16_t u16();
  std::uint32_t u32();
  std::int64_t i64();
  std::string_view bytes();  // a view into the input
  std::span<const std::uint8_t> raw(std::size_t n);
  bool ok() const { return ok_; }
  bool at_end() const { return ok_ && pos_ == in_.size(); }
  std::size_t remaining() const { return ok_ ? in_.size() - pos_ : 0; }

 private:
  bool take(std::size_t n);
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

// --- framing ----------------------------------------------------------------

// Builds one frame: a u32 length placeholder, then the body; finish() patches
// the length and returns the bytes ready to send.
class FrameBuilder {
 public:
  FrameBuilder() : bytes_(kFrameHeaderBytes, 0) {}
  Writer body() { return Writer(bytes_); }
  std::size_t body_size() const { return bytes_.size() - kFrameHeaderBytes; }
  std::vector<std::uint8_t> finish() &&;

 private:
  std::vector<std::uint8_t> bytes_;
};

// Receive buffer that cuts a byte stream into frames. Memory grows with the
// bytes actually received (at most about twice the frame being received, and
// never past the frame limit), not with what a header claims, so a hostile
// length cannot make the reader allocate.
class FrameBuffer {
 public:
  // `min_chunk`: the least space prepare() offers (a server with thousands
  // of connections keeps it small).
  explicit FrameBuffer(std::uint32_t max_frame_bytes, std::size_t min_chunk = 64 * 1024)
      : max_frame_(max_frame_bytes), min_chunk_(min_chunk) {}
  void set_max_frame_bytes(std::uint32_t n) { max_frame_ = n; }

  // Space to receive into; never empty.
  std::span<std::uint8_t> prepare();
  void commit(std::size_t n) { end_ += n; }
  // Frees the memory when nothing is buffered (an idle connection holds none).
  void release();
  // Drops every byte buffered (the start of a frame that is being refused).
  void drop() { begin_ = end_ = 0; }
  std::size_t capacity() const { return size_; }
  // Makes room for a frame of `bytes` in all (header included) at once, so a
  // large frame is received without growing step by step. The memory is not
  // touched (nor resident) until bytes arrive.
  void reserve(std::size_t bytes);
  // The length the next frame's header announces, once its header is here.
  std::optional<std::uint32_t> next_length() const;
  // The bytes buffered.
  std::span<const std::uint8_t> buffered_bytes() const {
    return {buf_.get() + begin_, end_ - begin_};
  }

  enum class Next { Frame, NeedMore, TooLarge };
  // The next complete frame's body, valid until the next prepare(). TooLarge
  // when a header announces more than the limit; frame_length() tells how much.
  Next next(std::span<const std::uint8_t>& body);
  std::uint32_t frame_length() const { return pending_length_; }
  std::size_t buffered() const { return end_ - begin_; }

 private:
  void resize(std::size_t bytes);  // keeps the bytes buffered; never zero-fills
  std::unique_ptr<std::uint8_t[]> buf_;
  std::size_t size_ = 0;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::uint32_t max_frame_;
  std::size_t min_chunk_;
  std::uint32_t pending_length_ = 0;
};

// --- handshake --------------------------------------------------------------

struct ClientHello {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  bool has_token = false;
  Nonce nonce{};
  std::uint16_t sealing = 0;  // seal::sealing_field: does the client ask to seal?
  seal::PublicKey key{};
};
std::array<std::uint8_t, kClientHelloBytes> encode(const ClientHello& hello);
ClientHello decode_client_hello(std::span<const std::uint8_t, kClientHelloBytes> bytes);

struct ServerHello {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  HelloStatus status = HelloStatus::Ok;
  bool auth_required = false;
  StoreLimits limits;
  // The server closes a connection idle this long (0: never); a client
  // reconnects before it sends on a connection that has been idle nearly as long.
  std::uint32_t idle_timeout_ms = 0;
  Nonce nonce{};
  Proof proof{};  // the server's proof of the token (auth.hpp); zero without auth
  std::uint16_t sealing = 0;  // seal::sealing_field: does the server ask to seal?
  seal::PublicKey key{};
};
std::array<std::uint8_t, kServerHelloBytes> encode(const ServerHello& hello);
ServerHello decode_server_hello(std::span<const std::uint8_t, kServerHelloBytes> bytes);

// --- requests ---------------------------------------------------------------

// One request, as the client builds it and the server parses it. Views point
// into the caller's strings (client) or the received frame (server).
//   keys:   the key(s); the barrier name; the count/list prefix
//   values: the value(s); compare_set's expected and desired
//   delta:  add's delta
//   number: barrier's n; cancel's target request id
struct Request {
  Op op = Op::Ping;
  std::uint32_t id = 0;
  std::vector<std::string_view> keys;
  std::vector<std::string_view> values;
  std::int64_t delta = 0;
  std::uint32_t number = 0;
};

// Encodes a request as one frame (length prefix included).
std::vector<std::uint8_t> encode(const Request& request);

// Checks a request against limits; returns the error text, or nullopt.
std::optional<std::string> check_limits(const Request& request, const StoreLimits& limits);

struct ParsedRequest {
  enum class Kind {
    Ok,             // `request` is valid
    LimitExceeded,  // well-formed, over a limit: reply with `error`, keep the connection
    Malformed,      // not a valid request: reply with `error` if `request.id` is known, close
  };
  Kind kind = Kind::Malformed;
  Request request;
  std::string error;
};

// Parses one frame body received from an untrusted client. Never throws for
// bad input, never allocates more than the input justifies.
ParsedRequest parse_request(std::span<const std::uint8_t> body, const StoreLimits& limits);

// --- replies ----------------------------------------------------------------

// Starts a reply frame; the caller appends the op's payload to body().
FrameBuilder begin_reply(ReplyStatus status, std::uint32_t id);
std::vector<std::uint8_t> error_reply(std::uint32_t id, ErrorCode code, std::string_view message);

}  // namespace collie::store::wire
