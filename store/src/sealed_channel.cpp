// A sealed store connection's records (sealed_channel.hpp).
#include "sealed_channel.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include <sys/socket.h>

#include <fmt/format.h>

namespace collie::store {

namespace {

constexpr std::size_t kRecordRoom = seal::kMaxRecordBytes + seal::kOverheadBytes;
constexpr std::size_t kMaxPieces = 64;

}  // namespace

SealedChannel::SealedChannel(const seal::Key& send, const seal::Key& receive)
    : sealer_(send), opener_(receive), in_(2 * kRecordRoom), plain_(seal::kMaxRecordBytes),
      out_(kBatchBytes + (kBatchBytes / seal::kMaxRecordBytes) * seal::kOverheadBytes) {}

bool SealedChannel::has_unread() const {
  if (plain_begin_ < plain_end_) return true;
  const std::size_t avail = in_end_ - in_begin_;
  if (avail < seal::kLengthBytes) return false;
  const std::size_t n = seal::Opener::announced(in_.data() + in_begin_);
  return n == 0 || n > seal::kMaxRecordBytes || avail >= n + seal::kOverheadBytes;
}

bool SealedChannel::open_next(std::error_code& ec) {
  const std::size_t avail = in_end_ - in_begin_;
  if (avail < seal::kLengthBytes) return false;
  const std::uint8_t* record = in_.data() + in_begin_;
  const std::size_t n = seal::Opener::announced(record);
  if (n == 0 || n > seal::kMaxRecordBytes) {
    failure_ = fmt::format("sealed record number {} says it holds {} bytes (1 to {} may): "
                           "the stream was changed on its way",
                           opener_.records(), n, seal::kMaxRecordBytes);
    ec = std::make_error_code(std::errc::bad_message);
    return false;
  }
  if (avail < n + seal::kOverheadBytes) return false;
  if (!opener_.open(record, n, plain_.data())) {
    std::memset(plain_.data(), 0, n);
    failure_ = fmt::format("sealed record number {} ({} bytes) fails its authentication: "
                           "it was changed, forged, cut, replayed or reordered on its way; "
                           "none of it was used",
                           opener_.records() - 1, n);
    ec = std::make_error_code(std::errc::bad_message);
    return false;
  }
  in_begin_ += n + seal::kOverheadBytes;
  if (in_begin_ == in_end_) in_begin_ = in_end_ = 0;
  plain_begin_ = 0;
  plain_end_ = n;
  return true;
}

std::size_t SealedChannel::read_some(int fd, std::span<std::uint8_t> out, std::error_code& ec) {
  ec.clear();
  if (!failure_.empty()) {
    ec = std::make_error_code(std::errc::bad_message);
    return 0;
  }
  for (;;) {
    if (plain_begin_ < plain_end_) {
      const std::size_t n = std::min(out.size(), plain_end_ - plain_begin_);
      std::memcpy(out.data(), plain_.data() + plain_begin_, n);
      plain_begin_ += n;
      return n;
    }
    if (open_next(ec)) continue;
    if (ec) return 0;
    if (in_begin_ > 0) {  // a record's first bytes go to the front
      std::memmove(in_.data(), in_.data() + in_begin_, in_end_ - in_begin_);
      in_end_ -= in_begin_;
      in_begin_ = 0;
    }
    const ssize_t got = ::recv(fd, in_.data() + in_end_, in_.size() - in_end_, MSG_DONTWAIT);
    if (got > 0) {
      in_end_ += static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0) {
      if (in_end_ > in_begin_) {
        failure_ = fmt::format("the connection ended in the middle of sealed record number {} "
                               "({} of its bytes came): cut on its way",
                               opener_.records(), in_end_ - in_begin_);
        ec = std::make_error_code(std::errc::bad_message);
      } else {
        ec = asio::error::eof;
      }
      return 0;
    }
    if (errno == EINTR) continue;
    ec = errno == EAGAIN || errno == EWOULDBLOCK ? make_error_code(asio::error::would_block)
                                                 : std::error_code(errno, std::system_category());
    return 0;
  }
}

std::span<const std::uint8_t> SealedChannel::seal_next(
    std::span<const asio::const_buffer> buffers, std::size_t offset, std::size_t& plain) {
  // The pieces from `offset`, up to a batch.
  std::array<std::span<const std::byte>, kMaxPieces> pieces;
  std::size_t count = 0;
  std::size_t skip = offset;
  std::size_t room = kBatchBytes;
  for (const auto& b : buffers) {
    if (room == 0 || count == kMaxPieces) break;
    if (skip >= b.size()) {
      skip -= b.size();
      continue;
    }
    const std::size_t take = std::min(b.size() - skip, room);
    pieces[count++] = {static_cast<const std::byte*>(b.data()) + skip, take};
    room -= take;
    skip = 0;
  }
  plain = kBatchBytes - room;
  // Cut into records.
  std::size_t at = 0;  // bytes of out_ written
  std::size_t piece = 0;
  std::size_t within = 0;
  std::size_t left = plain;
  while (left > 0) {
    const std::size_t record = std::min(left, seal::kMaxRecordBytes);
    std::array<std::span<const std::byte>, kMaxPieces> parts;
    std::size_t n = 0;
    for (std::size_t filled = 0; filled < record;) {
      const auto& p = pieces[piece];
      const std::size_t take = std::min(p.size() - within, record - filled);
      parts[n++] = p.subspan(within, take);
      filled += take;
      within += take;
      if (within == p.size()) {
        ++piece;
        within = 0;
      }
    }
    sealer_.seal(std::span(parts.data(), n), out_.data() + at);
    at += record + seal::kOverheadBytes;
    left -= record;
  }
  return {out_.data(), at};
}

}  // namespace collie::store
