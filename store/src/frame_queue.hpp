// Outgoing frames of one connection, written with gathering writes: while one
// write is in flight, new frames queue up and go out together in the next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include <asio/buffer.hpp>

namespace collie::store {

class FrameQueue {
 public:
  void push(std::vector<std::uint8_t> frame) {
    bytes_ += frame.size();
    frames_.push_back(std::move(frame));
  }

  // Buffers for the next write, or empty when a write is in flight or nothing
  // is queued. Call finish() when that write completes.
  std::vector<asio::const_buffer> start() {
    std::vector<asio::const_buffer> buffers;
    if (in_flight_ > 0) return buffers;
    for (const auto& frame : frames_) {
      if (buffers.size() == kMaxBuffersPerWrite) break;
      buffers.emplace_back(frame.data(), frame.size());
    }
    in_flight_ = buffers.size();
    return buffers;
  }

  void finish() {
    for (; in_flight_ > 0; --in_flight_) {
      bytes_ -= frames_.front().size();
      frames_.pop_front();
    }
  }

  void clear() {
    frames_.clear();
    bytes_ = 0;
    in_flight_ = 0;
  }

  bool writing() const { return in_flight_ > 0; }
  bool empty() const { return frames_.empty(); }
  std::size_t bytes() const { return bytes_; }

 private:
  static constexpr std::size_t kMaxBuffersPerWrite = 64;  // well under IOV_MAX
  std::deque<std::vector<std::uint8_t>> frames_;
  std::size_t bytes_ = 0;
  std::size_t in_flight_ = 0;
};

}  // namespace collie::store
