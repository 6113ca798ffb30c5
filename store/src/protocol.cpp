// The store's wire protocol (protocol.hpp): op names, the writer and reader,
// frames and the hellos; requests.cpp has the requests and replies.
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
  put_u16(out.data() + kClientHelloBaseBytes, hello.sealing);
  std::copy(hello.key.begin(), hello.key.end(), out.begin() + kClientHelloBaseBytes + 2);
  return out;
}

ClientHello decode_client_hello(std::span<const std::uint8_t, kClientHelloBytes> bytes) {
  ClientHello hello;
  hello.magic = get_u32(bytes.data());
  hello.version = get_u16(bytes.data() + 4);
  hello.has_token = (get_u16(bytes.data() + 6) & 1) != 0;
  std::copy(bytes.begin() + 8, bytes.begin() + 8 + kNonceBytes, hello.nonce.begin());
  hello.sealing = get_u16(bytes.data() + kClientHelloBaseBytes);
  std::copy(bytes.begin() + kClientHelloBaseBytes + 2, bytes.end(), hello.key.begin());
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
  std::copy(hello.proof.begin(), hello.proof.end(), p + kServerProofAt);
  put_u16(p + kServerHelloBaseBytes, hello.sealing);
  std::copy(hello.key.begin(), hello.key.end(), p + kServerHelloBaseBytes + 2);
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
  std::copy(p + kServerProofAt, p + kServerProofAt + kProofBytes, hello.proof.begin());
  hello.sealing = get_u16(p + kServerHelloBaseBytes);
  std::copy(p + kServerHelloBaseBytes + 2, p + kServerHelloBytes, hello.key.begin());
  return hello;
}

}  // namespace collie::store::wire
