// Outgoing frames of one connection, written with gathering writes: while one
// write is in flight, new frames queue up and go out together in the next.
//
// A frame is one or more pieces. A piece owns its bytes, or points into an
// object it keeps alive (a stored value, which a reply then never copies).
// The queue counts both; owned_bytes() is the memory the queue itself holds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include <asio/buffer.hpp>

namespace collie::store {

struct Piece {
  std::vector<std::uint8_t> owned;
  std::shared_ptr<const void> keep;  // set: the piece is `view`, inside it
  std::span<const std::uint8_t> view;

  static Piece bytes(std::vector<std::uint8_t> b) { return Piece{std::move(b), nullptr, {}}; }
  static Piece shared(std::shared_ptr<const void> keep, std::span<const std::uint8_t> view) {
    return Piece{{}, std::move(keep), view};
  }
  std::size_t size() const { return keep ? view.size() : owned.size(); }
  std::size_t owned_size() const { return keep ? 0 : owned.size(); }
  asio::const_buffer buffer() const {
    return keep ? asio::const_buffer(view.data(), view.size())
                : asio::const_buffer(owned.data(), owned.size());
  }
};

class FrameQueue {
 public:
  void push(std::vector<std::uint8_t> frame) { push(Piece::bytes(std::move(frame))); }
  void push(Piece piece) {
    bytes_ += piece.size();
    owned_ += piece.owned_size();
    pieces_.push_back(std::move(piece));
  }

  // Buffers for the next write, or empty when a write is in flight or nothing
  // is queued. Call finish() when that write completes.
  std::vector<asio::const_buffer> start() {
    std::vector<asio::const_buffer> buffers;
    if (in_flight_ > 0) return buffers;
    for (const auto& piece : pieces_) {
      if (buffers.size() == kMaxBuffersPerWrite) break;
      buffers.push_back(piece.buffer());
    }
    in_flight_ = buffers.size();
    return buffers;
  }

  // Drops the pieces written; returns the owned bytes they held.
  std::size_t finish() {
    std::size_t freed = 0;
    for (; in_flight_ > 0; --in_flight_) {
      bytes_ -= pieces_.front().size();
      freed += pieces_.front().owned_size();
      pieces_.pop_front();
    }
    owned_ -= freed;
    return freed;
  }

  // Drops everything; returns the owned bytes it held.
  std::size_t clear() {
    const std::size_t freed = owned_;
    pieces_.clear();
    bytes_ = 0;
    owned_ = 0;
    in_flight_ = 0;
    return freed;
  }

  bool writing() const { return in_flight_ > 0; }
  bool empty() const { return pieces_.empty(); }
  std::size_t bytes() const { return bytes_; }
  std::size_t owned_bytes() const { return owned_; }

 private:
  static constexpr std::size_t kMaxBuffersPerWrite = 64;  // well under IOV_MAX
  std::deque<Piece> pieces_;
  std::size_t bytes_ = 0;
  std::size_t owned_ = 0;
  std::size_t in_flight_ = 0;
};

}  // namespace collie::store
