// torch's TCPStore dialect (torch_dialect.hpp).
#include "torch_dialect.hpp"

#include <cstring>
#include <optional>
#include <utility>

#include <fmt/format.h>

namespace collie::store::torch {

namespace {

// Little-endian fields from untrusted bytes: every read checks the length.
class Cursor {
 public:
  explicit Cursor(std::span<const std::uint8_t> in) : in_(in) {}
  bool u8(std::uint8_t& v) {
    if (in_.size() - pos_ < 1) return false;
    v = in_[pos_++];
    return true;
  }
  template <class T>
  bool le(T& v) {
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i)
      x |= static_cast<std::uint64_t>(in_[pos_ + i]) << (8 * i);
    pos_ += sizeof(T);
    v = static_cast<T>(x);
    return true;
  }
  bool bytes(std::size_t n, std::string& out) {
    if (in_.size() - pos_ < n) return false;
    out.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  std::size_t pos() const { return pos_; }

 private:
  std::span<const std::uint8_t> in_;
  std::size_t pos_ = 0;
};

Command command_of(Dialect d, std::uint8_t type, bool& known) {
  known = true;
  if (d == Dialect::V1) {
    switch (type) {
      case 0: return Command::Set;
      case 1: return Command::CompareSet;
      case 2: return Command::Get;
      case 3: return Command::Add;
      case 4: return Command::Check;
      case 5: return Command::Wait;
      case 6: return Command::NumKeys;
      case 7: return Command::WatchKey;
      case 8: return Command::Delete;
      default: break;
    }
  } else {
    switch (type) {
      case 0: return Command::Validate;
      case 1: return Command::Set;
      case 2: return Command::CompareSet;
      case 3: return Command::Get;
      case 4: return Command::Add;
      case 5: return Command::Check;
      case 6: return Command::Wait;
      case 7: return Command::NumKeys;
      case 8: return Command::Delete;
      case 9: return Command::Append;
      case 10: return Command::MultiGet;
      case 11: return Command::MultiSet;
      case 12: return Command::CancelWait;
      case 13: return Command::Ping;
      default: break;
    }
  }
  known = false;
  return Command::Ping;
}

}  // namespace

Opening classify(std::span<const std::uint8_t> first) {
  if (first.empty()) return Opening::NeedMore;
  if (first[0] == 'C') return Opening::Collie;  // "CLST", collie's hello
  if (first[0] > 8) return Opening::Stranger;
  if (first[0] != 0) return Opening::TorchV1;
  // 0: torch 2.x's VALIDATE and its magic, or torch 1.x's SET of a key
  // whose length's low bytes would be the magic (over any key limit).
  if (first.size() < 5) return Opening::NeedMore;
  std::uint32_t magic = 0;
  for (int i = 0; i < 4; ++i)
    magic |= static_cast<std::uint32_t>(first[1 + static_cast<std::size_t>(i)]) << (8 * i);
  return magic == kValidateMagic ? Opening::TorchV2 : Opening::TorchV1;
}

std::string_view command_name(Command c) {
  switch (c) {
    case Command::Validate: return "VALIDATE";
    case Command::Set: return "SET";
    case Command::CompareSet: return "COMPARE_SET";
    case Command::Get: return "GET";
    case Command::Add: return "ADD";
    case Command::Check: return "CHECK";
    case Command::Wait: return "WAIT";
    case Command::NumKeys: return "GETNUMKEYS";
    case Command::WatchKey: return "WATCH_KEY";
    case Command::Delete: return "DELETE_KEY";
    case Command::Append: return "APPEND";
    case Command::MultiGet: return "MULTI_GET";
    case Command::MultiSet: return "MULTI_SET";
    case Command::CancelWait: return "CANCEL_WAIT";
    case Command::Ping: return "PING";
  }
  return "?";
}

Parsed parse(Dialect dialect, std::span<const std::uint8_t> in, const StoreLimits& limits,
             Query& out) {
  Cursor c(in);
  Parsed p;
  std::uint8_t type = 0;
  if (!c.u8(type)) return p;
  bool known = false;
  out = Query{};
  out.command = command_of(dialect, type, known);
  if (!known) {
    p.result = Parse::Malformed;
    p.error = fmt::format("unknown torch TCPStore query type {} (torch {} numbering)", type,
                          dialect == Dialect::V1 ? "1.x" : "2.x");
    return p;
  }
  std::size_t total = 1;  // bytes the query holds so far, against max_message_bytes
  bool too_large = false;
  // A string or vector: its uint64 length, checked against `limit`, then its bytes.
  auto field = [&](std::uint64_t limit, const char* what, std::string& to) {
    std::uint64_t n = 0;
    if (!c.le(n)) return false;
    if (n > limit || total + n > limits.max_message_bytes) {
      too_large = true;
      p.error = fmt::format("a {} of {} bytes in {} exceeds the store's limit of {} bytes", what,
                            n, command_name(out.command),
                            n > limit ? limit : std::uint64_t{limits.max_message_bytes});
      return false;
    }
    total += 8 + n;
    return c.bytes(static_cast<std::size_t>(n), to);
  };
  auto key = [&] {
    out.keys.emplace_back();
    return field(limits.max_key_bytes, "key", out.keys.back());
  };
  auto value = [&] {
    out.values.emplace_back();
    return field(limits.max_value_bytes, "value", out.values.back());
  };
  auto count = [&](std::uint64_t& n) {
    if (!c.le(n)) return false;
    if (n > limits.max_keys_per_request) {
      too_large = true;
      p.error = fmt::format("{} of {} keys exceeds the store's limit of {} keys per request",
                            command_name(out.command), n, limits.max_keys_per_request);
      return false;
    }
    return true;
  };
  bool whole = false;
  switch (out.command) {
    case Command::Validate:
    case Command::Ping:
      whole = c.le(out.word);
      break;
    case Command::Set:
    case Command::Append:
      whole = key() && value();
      break;
    case Command::CompareSet:
      whole = key() && value() && value();
      break;
    case Command::Get:
    case Command::WatchKey:
    case Command::Delete:
      whole = key();
      break;
    case Command::Add:
      whole = key() && c.le(out.number);
      break;
    case Command::NumKeys:
    case Command::CancelWait:
      whole = true;
      break;
    case Command::Check:
    case Command::Wait:
    case Command::MultiGet: {
      std::uint64_t n = 0;
      whole = count(n);
      for (std::uint64_t i = 0; whole && i < n; ++i)
        whole = key();
      break;
    }
    case Command::MultiSet: {
      std::uint64_t n = 0;
      whole = count(n);
      for (std::uint64_t i = 0; whole && i < n; ++i)
        whole = key() && value();
      break;
    }
  }
  if (too_large) {
    p.result = Parse::TooLarge;
    return p;
  }
  if (!whole) return p;  // NeedMore
  p.result = Parse::Done;
  p.used = c.pos();
  return p;
}

void put_u8(std::vector<std::uint8_t>& out, std::uint8_t v) {
  out.push_back(v);
}
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_i64(std::vector<std::uint8_t>& out, std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::uint8_t>(u >> (8 * i)));
}
void put_bytes(std::vector<std::uint8_t>& out, std::string_view v) {
  put_i64(out, static_cast<std::int64_t>(v.size()));
  out.insert(out.end(), v.begin(), v.end());
}

namespace {

// The collie operation a torch command becomes; none for the commands the
// session answers itself (validate, ping, watch, cancel).
std::optional<wire::Op> collie_op(Command c) {
  static constexpr std::pair<Command, wire::Op> kOps[] = {
      {Command::Set, wire::Op::Set},
      {Command::Append, wire::Op::Append},
      {Command::CompareSet, wire::Op::CompareSet},
      {Command::Get, wire::Op::Get},
      {Command::Add, wire::Op::Add},
      {Command::Check, wire::Op::Check},
      {Command::Wait, wire::Op::Wait},
      {Command::NumKeys, wire::Op::CountKeys},
      {Command::Delete, wire::Op::Delete},
      {Command::MultiGet, wire::Op::MultiGet},
      {Command::MultiSet, wire::Op::MultiSet},
  };
  for (const auto& [command, op] : kOps)
    if (command == c) return op;
  return std::nullopt;
}

}  // namespace

Translation translate(const Query& q, std::uint32_t id) {
  Translation t;
  auto& r = t.request;
  r.id = id;
  for (const auto& k : q.keys)
    r.keys.emplace_back(k);
  for (const auto& v : q.values)
    r.values.emplace_back(v);
  const auto op = collie_op(q.command);
  if (!op) return t;  // Nothing
  r.op = *op;
  if (q.command == Command::Add) r.delta = q.number;
  if (q.command == Command::NumKeys) r.keys.emplace_back();  // no prefix: every key
  // An empty list: torch's server answers at once, and so does this one.
  if (r.keys.empty()) {
    if (r.op == wire::Op::Check) {
      t.kind = Translation::Kind::Answer;
      t.answer = {kCheckReady};
      return t;
    }
    if (r.op == wire::Op::Wait) {
      t.kind = Translation::Kind::Answer;
      t.answer = {kStopWaiting};
      return t;
    }
    if (r.op == wire::Op::MultiGet || r.op == wire::Op::MultiSet) return t;  // Nothing
  }
  t.kind = Translation::Kind::Request;
  return t;
}

std::optional<std::uint32_t> reply_id(std::span<const std::uint8_t> frame) {
  if (frame.size() < wire::kFrameHeaderBytes) return std::nullopt;
  wire::Reader rd(frame.subspan(wire::kFrameHeaderBytes));
  rd.u8();  // status
  const std::uint32_t id = rd.u32();
  if (!rd.ok()) return std::nullopt;
  return id;
}

Rewrite rewrite_reply(std::span<const std::uint8_t> frame, Command command,
                      std::string_view expected) {
  Rewrite out;
  if (frame.size() < wire::kFrameHeaderBytes) return out;
  wire::Reader rd(frame.subspan(wire::kFrameHeaderBytes));
  const auto status = static_cast<wire::ReplyStatus>(rd.u8());
  rd.u32();  // the id
  if (status != wire::ReplyStatus::Ok) {
    rd.u16();
    out.kind = Rewrite::Kind::Failed;
    out.error = std::string(rd.bytes());
    return out;
  }
  auto& reply = out.reply;
  switch (command) {
    case Command::Set:
    case Command::Append:
    case Command::MultiSet:
      out.kind = Rewrite::Kind::NoReply;
      return out;
    case Command::Get:
      put_bytes(reply, rd.bytes());
      break;
    case Command::CompareSet: {
      rd.u8();  // swapped
      const bool exists = rd.u8() != 0;
      const auto current = rd.bytes();
      // As torch's own server: a missing key (and an expected value that is
      // not empty) answers with the expected value.
      put_bytes(reply, exists ? current : expected);
      break;
    }
    case Command::Add:
    case Command::NumKeys:
      put_i64(reply, rd.i64());
      break;
    case Command::Check:
      put_u8(reply, rd.u8() != 0 ? kCheckReady : kCheckNotReady);
      break;
    case Command::Wait:
      put_u8(reply, kStopWaiting);
      break;
    case Command::Delete:
      put_i64(reply, rd.u8() != 0 ? 1 : 0);
      break;
    case Command::MultiGet: {
      const std::uint32_t n = rd.u32();
      for (std::uint32_t i = 0; i < n && rd.ok(); ++i)
        put_bytes(reply, rd.bytes());
      break;
    }
    default:
      out.kind = Rewrite::Kind::NoReply;
      return out;
  }
  if (!rd.ok()) {
    out.reply.clear();
    return out;  // Unreadable
  }
  out.kind = Rewrite::Kind::Reply;
  return out;
}

}  // namespace collie::store::torch
