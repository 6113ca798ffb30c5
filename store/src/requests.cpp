// The store's requests and replies (protocol.hpp): encoded, checked against
// the limits, and parsed from untrusted bytes.
#include "protocol.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace collie::store::wire {

namespace {

// How an op lays out its payload after (op, id).
enum class Layout {
  Key,           // key
  KeyValue,      // key, value
  KeyDelta,      // key, i64
  KeyTwoValues,  // key, expected, desired
  KeyList,       // u32 n, n keys
  Pairs,         // u32 n, n (key, value)
  KeyNumber,     // name, u32
  Number,        // u32
  Empty,
};

std::optional<Layout> layout_of(std::uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::Get:
    case Op::TryGet:
    case Op::Delete:
    case Op::CountKeys:
    case Op::ListKeys:
      return Layout::Key;
    case Op::Set:
    case Op::Append:
      return Layout::KeyValue;
    case Op::Add:
      return Layout::KeyDelta;
    case Op::CompareSet:
      return Layout::KeyTwoValues;
    case Op::Wait:
    case Op::Check:
    case Op::MultiGet:
      return Layout::KeyList;
    case Op::MultiSet:
      return Layout::Pairs;
    case Op::Barrier:
      return Layout::KeyNumber;
    case Op::Cancel:
      return Layout::Number;
    case Op::Ping:
    case Op::Torch:
      return Layout::Empty;
  }
  return std::nullopt;
}

// Smallest encoding of one key: its u32 length.
constexpr std::size_t kMinKeyBytes = 4;

}  // namespace

std::vector<std::uint8_t> encode(const Request& request) {
  FrameBuilder frame;
  Writer w = frame.body();
  w.u8(static_cast<std::uint8_t>(request.op));
  w.u32(request.id);
  switch (*layout_of(static_cast<std::uint8_t>(request.op))) {
    case Layout::Key:
      w.bytes(request.keys.at(0));
      break;
    case Layout::KeyValue:
      w.bytes(request.keys.at(0));
      w.bytes(request.values.at(0));
      break;
    case Layout::KeyDelta:
      w.bytes(request.keys.at(0));
      w.i64(request.delta);
      break;
    case Layout::KeyTwoValues:
      w.bytes(request.keys.at(0));
      w.bytes(request.values.at(0));
      w.bytes(request.values.at(1));
      break;
    case Layout::KeyList:
      w.u32(static_cast<std::uint32_t>(request.keys.size()));
      for (auto key : request.keys)
        w.bytes(key);
      break;
    case Layout::Pairs:
      w.u32(static_cast<std::uint32_t>(request.keys.size()));
      for (std::size_t i = 0; i < request.keys.size(); ++i) {
        w.bytes(request.keys[i]);
        w.bytes(request.values.at(i));
      }
      break;
    case Layout::KeyNumber:
      w.bytes(request.keys.at(0));
      w.u32(request.number);
      break;
    case Layout::Number:
      w.u32(request.number);
      break;
    case Layout::Empty:
      break;
  }
  return std::move(frame).finish();
}

std::optional<std::string> check_limits(const Request& request, const StoreLimits& limits) {
  if (request.keys.size() > limits.max_keys_per_request) {
    return fmt::format("{} of {} keys exceeds the store's limit of {} keys per request",
                       op_name(request.op), request.keys.size(), limits.max_keys_per_request);
  }
  for (auto key : request.keys) {
    if (key.size() > limits.max_key_bytes) {
      return fmt::format("{}: key of {} bytes exceeds the store's limit of {} bytes",
                         op_name(request.op), key.size(), limits.max_key_bytes);
    }
  }
  for (auto value : request.values) {
    if (value.size() > limits.max_value_bytes) {
      return fmt::format("{}: value of {} bytes exceeds the store's limit of {} bytes",
                         op_name(request.op), value.size(), limits.max_value_bytes);
    }
  }
  std::size_t total = 1 + 4 + 4 + 8 + 4;
  for (auto key : request.keys)
    total += 4 + key.size();
  for (auto value : request.values)
    total += 4 + value.size();
  if (total > limits.max_message_bytes) {
    return fmt::format("{}: request of {} bytes exceeds the store's limit of {} bytes per message",
                       op_name(request.op), total, limits.max_message_bytes);
  }
  return std::nullopt;
}

ParsedRequest parse_request(std::span<const std::uint8_t> body, const StoreLimits& limits) {
  ParsedRequest out;
  Reader r(body);
  const std::uint8_t op = r.u8();
  out.request.id = r.u32();
  if (!r.ok()) {
    out.error = fmt::format("request of {} bytes is shorter than its 5-byte header", body.size());
    return out;
  }
  const auto layout = layout_of(op);
  if (!layout) {
    out.error = fmt::format("unknown operation code {}", op);
    return out;
  }
  Request& req = out.request;
  req.op = static_cast<Op>(op);
  switch (*layout) {
    case Layout::Key:
      req.keys.push_back(r.bytes());
      break;
    case Layout::KeyValue:
      req.keys.push_back(r.bytes());
      req.values.push_back(r.bytes());
      break;
    case Layout::KeyDelta:
      req.keys.push_back(r.bytes());
      req.delta = r.i64();
      break;
    case Layout::KeyTwoValues:
      req.keys.push_back(r.bytes());
      req.values.push_back(r.bytes());
      req.values.push_back(r.bytes());
      break;
    case Layout::KeyList:
    case Layout::Pairs: {
      const std::uint32_t n = r.u32();
      const std::size_t per_item = *layout == Layout::Pairs ? 2 * kMinKeyBytes : kMinKeyBytes;
      if (!r.ok()) break;
      if (n > limits.max_keys_per_request) {
        out.kind = ParsedRequest::Kind::LimitExceeded;
        out.error = fmt::format("{} of {} keys exceeds the store's limit of {} keys per request",
                                op_name(req.op), n, limits.max_keys_per_request);
        return out;
      }
      // Reserve only what the bytes present can actually hold.
      if (r.remaining() / per_item < n) {
        out.error = fmt::format("{} announces {} keys but carries only {} bytes", op_name(req.op),
                                n, r.remaining());
        return out;
      }
      req.keys.reserve(n);
      if (*layout == Layout::Pairs) req.values.reserve(n);
      for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
        req.keys.push_back(r.bytes());
        if (*layout == Layout::Pairs) req.values.push_back(r.bytes());
      }
      break;
    }
    case Layout::KeyNumber:
      req.keys.push_back(r.bytes());
      req.number = r.u32();
      break;
    case Layout::Number:
      req.number = r.u32();
      break;
    case Layout::Empty:
      break;
  }
  if (!r.ok()) {
    out.error = fmt::format("{} request is truncated ({} bytes)", op_name(req.op), body.size());
    return out;
  }
  if (!r.at_end()) {
    out.error =
        fmt::format("{} request has {} unexpected trailing bytes", op_name(req.op), r.remaining());
    return out;
  }
  if (auto error = check_limits(req, limits)) {
    out.kind = ParsedRequest::Kind::LimitExceeded;
    out.error = std::move(*error);
    return out;
  }
  out.kind = ParsedRequest::Kind::Ok;
  return out;
}

// --- replies ----------------------------------------------------------------

FrameBuilder begin_reply(ReplyStatus status, std::uint32_t id) {
  FrameBuilder frame;
  frame.body().u8(static_cast<std::uint8_t>(status));
  frame.body().u32(id);
  return frame;
}

std::vector<std::uint8_t> error_reply(std::uint32_t id, ErrorCode code, std::string_view message) {
  FrameBuilder frame = begin_reply(ReplyStatus::Error, id);
  frame.body().u16(static_cast<std::uint16_t>(code));
  // An error text never makes a reply exceed the smallest message limit.
  frame.body().bytes(message.substr(0, kMinMessageBytes - 64));
  return std::move(frame).finish();
}

}  // namespace collie::store::wire
