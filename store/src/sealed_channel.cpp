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

constexpr std::size_t kMaxPieces = 64;

}  // namespace

SealedChannel::SealedChannel(const seal::Key& send, const seal::Key& receive)
    : sealer_(send), opener_(receive) {}

bool SealedChannel::has_unread() const {
  if (plain_begin_ < plain_end_) return true;
  const std::size_t avail = in_end_ - in_begin_;
  if (avail < seal::kLengthBytes) return false;
  const std::size_t n = seal::Opener::announced(in_.get() + in_begin_);
  return n == 0 || n > seal::kMaxRecordBytes || avail >= n + seal::kOverheadBytes;
}

bool SealedChannel::open_next(std::error_code& ec) {
  const std::size_t avail = in_end_ - in_begin_;
  if (avail < seal::kLengthBytes) return false;
  std::uint8_t* record = in_.get() + in_begin_;
  const std::size_t n = seal::Opener::announced(record);
  if (n == 0 || n > seal::kMaxRecordBytes) {
    failure_ = fmt::format("sealed record number {} says it holds {} bytes (1 to {} may): "
                           "the stream was changed on its way",
                           opener_.records(), n, seal::kMaxRecordBytes);
    ec = std::make_error_code(std::errc::bad_message);
    return false;
  }
  if (avail < n + seal::kOverheadBytes) return false;
  if (!opener_.open(record, n, record + seal::kLengthBytes)) {
    std::memset(record + seal::kLengthBytes, 0, n);
    failure_ = fmt::format("sealed record number {} ({} bytes) fails its authentication: "
                           "it was changed, forged, cut, replayed or reordered on its way; "
                           "none of it was used",
                           opener_.records() - 1, n);
    ec = std::make_error_code(std::errc::bad_message);
    return false;
  }
  plain_begin_ = in_begin_ + seal::kLengthBytes;
  plain_end_ = plain_begin_ + n;
  in_begin_ += n + seal::kOverheadBytes;
  return true;
}

void SealedChannel::make_room() {
  // Only a record's first bytes are here (read_some opens every whole one
  // and hands out their plaintext first): they go to the front.
  const std::size_t part = in_end_ - in_begin_;
  std::size_t rest = seal::kLengthBytes;
  if (part >= seal::kLengthBytes) {
    rest = seal::Opener::announced(in_.get() + in_begin_) + seal::kOverheadBytes - part;
  }
  const std::size_t need = part + rest + kReadAhead;
  if (in_size_ < need) {
    auto bigger = std::make_unique_for_overwrite<std::uint8_t[]>(need);
    if (part > 0) std::memcpy(bigger.get(), in_.get() + in_begin_, part);
    in_ = std::move(bigger);
    in_size_ = need;
  } else if (in_begin_ > 0 && part > 0) {
    std::memmove(in_.get(), in_.get() + in_begin_, part);
  }
  plain_begin_ = plain_end_ = 0;
  in_begin_ = 0;
  in_end_ = part;
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
      std::memcpy(out.data(), in_.get() + plain_begin_, n);
      plain_begin_ += n;
      if (plain_begin_ == plain_end_ && in_begin_ == in_end_) {
        // All taken: the buffer goes until bytes come again.
        in_.reset();
        in_size_ = plain_begin_ = plain_end_ = in_begin_ = in_end_ = 0;
      }
      return n;
    }
    if (open_next(ec)) continue;
    if (ec) return 0;
    make_room();
    const ssize_t got = ::recv(fd, in_.get() + in_end_, in_size_ - in_end_, MSG_DONTWAIT);
    if (got > 0) {
      in_end_ += static_cast<std::size_t>(got);
      continue;
    }
    const int error = errno;
    if (in_end_ == 0) {  // nothing under way: nothing held while waiting
      in_.reset();
      in_size_ = 0;
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
    if (error == EINTR) continue;
    ec = error == EAGAIN || error == EWOULDBLOCK ? make_error_code(asio::error::would_block)
                                                 : std::error_code(error, std::system_category());
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
  const std::size_t need = seal::sealed_size(plain);
  if (out_size_ < need) {
    out_ = std::make_unique_for_overwrite<std::uint8_t[]>(need);
    out_size_ = need;
  }
  const std::size_t size = sealer_.seal_records(std::span(pieces.data(), count), plain, out_.get());
  return {out_.get(), size};
}

void SealedChannel::written() {
  out_.reset();
  out_size_ = 0;
}

}  // namespace collie::store
