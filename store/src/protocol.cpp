// The store's wire protocol: frames, requests and replies, parsed under
// limits (protocol.hpp).
#include "protocol.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace collie::store::wire {

std::string_view op_name(Op op) {
  switch (op) {
    case Op::Set:
      return "set";
    case Op::Get:
      return "get";
    case Op::TryGet:
      return "try_get";
    case Op::Add:
      return "add";
    case Op::CompareSet:
      return "compare_set";
    case Op::Wait:
      return "wait";
    case Op::Check:
      return "check";
    case Op::Delete:
      return "delete";
    case Op::CountKeys:
      return "count_keys";
    case Op::ListKeys:
      return "list_keys";
    case Op::MultiGet:
      return "multi_get";
    case Op::MultiSet:
      return "multi_set";
    case Op::Append:
      return "append";
    case Op::Barrier:
      return "barrier";
    case Op::Cancel:
      return "cancel";
    case Op::Ping:
      return "ping";
    case Op::Torch:
      return "torch";
  }
  return "unknown";
}

// --- Writer / Reader ----------------------------------------------------------

void Writer::u16(std::uint16_t v) {
  std::uint8_t b[2];
  put_u16(b, v);
  out_.insert(out_.end(), b, b + 2);
}

void Writer::u32(std::uint32_t v) {
  std::uint8_t b[4];
  put_u32(b, v);
  out_.insert(out_.end(), b, b + 4);
}

void Writer::i64(std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(v);
  u32(static_cast<std::uint32_t>(u >> 32));
  u32(static_cast<std::uint32_t>(u));
}

void Writer::bytes(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  out_.insert(out_.end(), s.begin(), s.end());
}

bool Reader::take(std::size_t n) {
  if (!ok_ || in_.size() - pos_ < n) {
    ok_ = false;
    return false;
  }
  return true;
}

std::uint8_t Reader::u8() {
  if (!take(1)) return 0;
  return in_[pos_++];
}

std::uint16_t Reader::u16() {
  if (!take(2)) return 0;
  const auto v = get_u16(in_.data() + pos_);
  pos_ += 2;
  return v;
}

std::uint32_t Reader::u32() {
  if (!take(4)) return 0;
  const auto v = get_u32(in_.data() + pos_);
  pos_ += 4;
  return v;
}

std::int64_t Reader::i64() {
  const std::uint64_t hi = u32();
  const std::uint64_t lo = u32();
  return static_cast<std::int64_t>((hi << 32) | lo);
}

std::string_view Reader::bytes() {
  const std::uint32_t n = u32();
  if (!take(n)) return {};
  std::string_view s(reinterpret_cast<const char*>(in_.data() + pos_), n);
  pos_ += n;
  return s;
}

std::span<const std::uint8_t> Reader::raw(std::size_t n) {
  if (!take(n)) return {};
  auto s = in_.subspan(pos_, n);
  pos_ += n;
  return s;
}

// --- framing ----------------------------------------------------------------

std::vector<std::uint8_t> FrameBuilder::finish() && {
  put_u32(bytes_.data(), static_cast<std::uint32_t>(body_size()));
  return std::move(bytes_);
}

namespace {
constexpr std::size_t kShrinkAbove = 1 << 20;
}  // namespace

void FrameBuffer::resize(std::size_t bytes) {
  // Live bytes move to the front; new memory is left uninitialised.
  auto grown = std::make_unique_for_overwrite<std::uint8_t[]>(bytes);
  if (end_ > begin_) std::memcpy(grown.get(), buf_.get() + begin_, end_ - begin_);
  end_ -= begin_;
  begin_ = 0;
  buf_ = std::move(grown);
  size_ = bytes;
}

void FrameBuffer::release() {
  if (begin_ != end_) return;
  begin_ = end_ = 0;
  buf_.reset();
  size_ = 0;
}

void FrameBuffer::reserve(std::size_t bytes) {
  if (size_ - begin_ < bytes) resize(std::max(bytes, end_ - begin_));
}

std::optional<std::uint32_t> FrameBuffer::next_length() const {
  if (end_ - begin_ < kFrameHeaderBytes) return std::nullopt;
  return get_u32(buf_.get() + begin_);
}

std::span<std::uint8_t> FrameBuffer::prepare() {
  if (begin_ == end_) {
    begin_ = end_ = 0;
    // A large frame is gone: do not keep its memory for an idle connection.
    if (size_ > std::max(kShrinkAbove, min_chunk_)) release();
  }
  // How much the frame being received needs in all (header, then body).
  std::size_t needed = kFrameHeaderBytes;
  if (end_ - begin_ >= kFrameHeaderBytes) {
    needed += std::min<std::size_t>(get_u32(buf_.get() + begin_), max_frame_);
  }
  if (size_ - begin_ < std::max(needed, min_chunk_) && begin_ > 0) {
    std::memmove(buf_.get(), buf_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == size_) {
    // Grow towards `needed`, at most doubling what was received so far.
    const std::size_t target = std::max(min_chunk_, std::min(needed, 2 * end_));
    resize(std::max(target, end_ + 1));
  }
  return {buf_.get() + end_, size_ - end_};
}

FrameBuffer::Next FrameBuffer::next(std::span<const std::uint8_t>& body) {
  const std::size_t available = end_ - begin_;
  if (available < kFrameHeaderBytes) return Next::NeedMore;
  const std::uint32_t length = get_u32(buf_.get() + begin_);
  pending_length_ = length;
  if (length > max_frame_) return Next::TooLarge;
  if (available - kFrameHeaderBytes < length) return Next::NeedMore;
  body = {buf_.get() + begin_ + kFrameHeaderBytes, length};
  begin_ += kFrameHeaderBytes + length;
  return Next::Frame;
}

// --- handshake ----------------------------------------------------------------

std::array<std::uint8_t, kClientHelloBytes> encode(const ClientHello& hello) {
  std::array<std::uint8_t, kClientHelloBytes> out{};
  put_u32(out.data(), hello.magic);
  put_u16(out.data() + 4, hello.version);
  put_u16(out.data() + 6, hello.has_token ? 1 : 0);
  std::copy(hello.nonce.begin(), hello.nonce.end(), out.begin() + 8);
  return out;
}

ClientHello decode_client_hello(std::span<const std::uint8_t, kClientHelloBytes> bytes) {
  ClientHello hello;
  hello.magic = get_u32(bytes.data());
  hello.version = get_u16(bytes.data() + 4);
  hello.has_token = (get_u16(bytes.data() + 6) & 1) != 0;
  std::copy(bytes.begin() + 8, bytes.end(), hello.nonce.begin());
  return hello;
}

std::array<std::uint8_t, kServerHelloBytes> encode(const ServerHello& hello) {
  std::array<std::uint8_t, kServerHelloBytes> out{};
  std::uint8_t* p = out.data();
  put_u32(p, hello.magic);
  put_u16(p + 4, hello.version);
  p[6] = static_cast<std::uint8_t>(hello.status);
  p[7] = hello.auth_required ? 1 : 0;
  put_u32(p + 8, hello.limits.max_key_bytes);
  put_u32(p + 12, hello.limits.max_value_bytes);
  put_u32(p + 16, hello.limits.max_keys_per_request);
  put_u32(p + 20, hello.limits.max_message_bytes);
  put_u32(p + 24, hello.idle_timeout_ms);
  std::copy(hello.nonce.begin(), hello.nonce.end(), p + 28);
  std::copy(hello.proof.begin(), hello.proof.end(), p + 28 + kNonceBytes);
  return out;
}

ServerHello decode_server_hello(std::span<const std::uint8_t, kServerHelloBytes> bytes) {
  const std::uint8_t* p = bytes.data();
  ServerHello hello;
  hello.magic = get_u32(p);
  hello.version = get_u16(p + 4);
  hello.status = static_cast<HelloStatus>(p[6]);
  hello.auth_required = (p[7] & 1) != 0;
  hello.limits.max_key_bytes = get_u32(p + 8);
  hello.limits.max_value_bytes = get_u32(p + 12);
  hello.limits.max_keys_per_request = get_u32(p + 16);
  hello.limits.max_message_bytes = get_u32(p + 20);
  hello.idle_timeout_ms = get_u32(p + 24);
  std::copy(p + 28, p + 28 + kNonceBytes, hello.nonce.begin());
  std::copy(p + 28 + kNonceBytes, p + 28 + kNonceBytes + kProofBytes, hello.proof.begin());
  return hello;
}

// --- requests ---------------------------------------------------------------

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
