// torch.distributed's TCPStore, as the store speaks it to torch's own
// clients (`collie store serve --torch`; docs/torch.md).
//
// TCPStore's wire: no framing; a query is a one-byte type, then fields in
// the client's byte order (little-endian: x86-64 and aarch64): strings and
// byte vectors as a uint64 length and the bytes, integers as int64, counts
// as uint64. Replies are the same fields, or a one-byte code. Two dialects:
//   torch 1.x: SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5 GETNUMKEYS=6
//              WATCH_KEY=7 DELETE_KEY=8
//   torch 2.x: VALIDATE=0 (a uint32 magic, first on every connection) SET=1
//              COMPARE_SET=2 GET=3 ADD=4 CHECK=5 WAIT=6 GETNUMKEYS=7
//              DELETE_KEY=8 APPEND=9 MULTI_GET=10 MULTI_SET=11
//              CANCEL_WAIT=12 PING=13
// A connection tells which by its first bytes (classify()). Parsing is
// incremental and checks every length against the store's limits before it
// keeps anything, so a hostile client costs at most one request's bytes.
// Then each query becomes the store's own request that does the same on the
// same keys (translate()), and the store's reply is rewritten in torch's
// form (rewrite_reply()): pure functions, which the fuzzer reaches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <collie/store/store.hpp>

#include "protocol.hpp"

namespace collie::store::torch {

// The magic a torch 2.x client sends with VALIDATE.
inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

enum class Dialect : std::uint8_t { V1, V2 };

// What a connection's first bytes say it is.
enum class Opening {
  Collie,    // collie's own protocol (its hello's first byte)
  TorchV1,   // a torch 1.x query
  TorchV2,   // a torch 2.x VALIDATE with its magic
  NeedMore,  // not enough bytes to tell
  Stranger,  // neither
};
Opening classify(std::span<const std::uint8_t> first);

enum class Command : std::uint8_t {
  Validate,
  Set,
  CompareSet,
  Get,
  Add,
  Check,
  Wait,
  NumKeys,
  WatchKey,
  Delete,
  Append,
  MultiGet,
  MultiSet,
  CancelWait,
  Ping,
};
std::string_view command_name(Command c);

struct Query {
  Command command = Command::Ping;
  std::vector<std::string> keys;
  std::vector<std::string> values;  // Set, Append: 1; CompareSet: expected, desired; MultiSet: 1 per key
  std::int64_t number = 0;          // Add
  std::uint32_t word = 0;           // Validate: the magic; Ping: the nonce
};

enum class Parse { Done, NeedMore, Malformed, TooLarge };
struct Parsed {
  Parse result = Parse::NeedMore;
  std::size_t used = 0;  // bytes of the input the query took (Done)
  std::string error;     // Malformed, TooLarge: why
};

// Parses the query at the front of `in`. A length over the limits is
// TooLarge as soon as it is read, before its bytes arrive.
Parsed parse(Dialect dialect, std::span<const std::uint8_t> in, const StoreLimits& limits,
             Query& out);

// What the store does for a query of any command but Validate, Ping,
// WatchKey and CancelWait (the connection's own business).
struct Translation {
  enum class Kind {
    Request,  // run `request`, then rewrite its reply (rewrite_reply())
    Answer,   // send `answer` at once (an empty key list: as torch's own server)
    Nothing,  // nothing to do, nothing to say
  };
  Kind kind = Kind::Nothing;
  wire::Request request;
  std::vector<std::uint8_t> answer;
};
// The request with id `id` that does what `q` asks.
Translation translate(const Query& q, std::uint32_t id);

// The id of the request a store reply frame answers; nullopt if it is too
// short to say.
std::optional<std::uint32_t> reply_id(std::span<const std::uint8_t> frame);

// torch's reply to the store's reply `frame` for a query of `command`
// (`expected`: COMPARE_SET's expected value, which a missing key answers).
struct Rewrite {
  enum class Kind {
    Reply,       // send `reply`
    NoReply,     // torch expects none (SET, APPEND, MULTI_SET)
    Failed,      // the store refused the request: `error` (torch cannot be told)
    Unreadable,  // the frame is not a reply of this command
  };
  Kind kind = Kind::Unreadable;
  std::vector<std::uint8_t> reply;
  std::string error;
};
Rewrite rewrite_reply(std::span<const std::uint8_t> frame, Command command,
                      std::string_view expected);

// Reply fields, in the client's byte order.
void put_u8(std::vector<std::uint8_t>& out, std::uint8_t v);
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v);
void put_i64(std::vector<std::uint8_t>& out, std::int64_t v);
void put_bytes(std::vector<std::uint8_t>& out, std::string_view v);  // uint64 length, bytes

// One-byte reply codes.
inline constexpr std::uint8_t kCheckReady = 0;
inline constexpr std::uint8_t kCheckNotReady = 1;
inline constexpr std::uint8_t kStopWaiting = 0;
inline constexpr std::uint8_t kWaitCanceled = 1;

}  // namespace collie::store::torch
