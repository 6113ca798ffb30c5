// Messages that arrive before their receive, and the memory they take.
//
// Each unexpected message gets a buffer of its exact size, read into
// directly: one of up to 64 KiB is a block of the process's pool
// (block_pool.hpp), so a steady stream of calls allocates nothing. The pool counts the bytes held across all peers against
// `max_unexpected_bytes` (a peer whose next message does not fit is paused
// by its stream) and keeps consumed buffers larger than the pool's blocks,
// up to 16 MiB in all, for the next messages of the same size: a pipelined
// collective sends many segments of one size, and reusing their buffers
// saves an allocation (and its page faults) per message. Not thread-safe: used under
// the connection table's lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "../block_pool.hpp"

namespace collie::transport::tcp {

// A queued message's bytes: a pooled block (of `pooled` bytes), or an
// array on the heap (0).
struct QueuedBytesDeleter {
  std::size_t pooled = 0;
  void operator()(std::byte* p) const noexcept;
};
using QueuedBytes = std::unique_ptr<std::byte[], QueuedBytesDeleter>;

struct Unexpected {
  std::uint64_t fingerprint = 0;
  std::size_t length = 0;
  QueuedBytes data;
  std::size_t got = 0;  // payload bytes read so far
  bool complete = false;
};

class UnexpectedPool {
 public:
  explicit UnexpectedPool(std::size_t limit) : limit_(limit) {}

  // Whether a message of `length` bytes may be queued now.
  bool fits(std::size_t length) const { return length == 0 || held_ + length <= limit_; }

  // A queued message of `length` bytes, counted as held (whether or not it
  // fits: a send to oneself is always buffered).
  std::shared_ptr<Unexpected> hold(std::size_t length, std::uint64_t fingerprint);

  // The message left the queue (matched by a receive, or dropped).
  void release(const Unexpected& u) {
    held_ -= u.length;
    queued_.fetch_sub(1, std::memory_order_relaxed);
  }

  // Keeps the buffer of a message that was consumed, for the next one.
  void recycle(QueuedBytes buffer, std::size_t length);

  std::size_t held() const { return held_; }
  // Messages queued now (0-byte ones too).
  std::size_t queued() const { return queued_.load(std::memory_order_relaxed); }
  std::size_t limit() const { return limit_; }

 private:
  // (Smaller buffers are the block pool's.)
  static constexpr std::size_t kMinRecycled = BlockPool::kLargestBytes + 1;
  static constexpr std::size_t kMaxSpareBytes = std::size_t{16} << 20;

  const std::size_t limit_;
  std::size_t held_ = 0;
  // Written under the table's lock; read without it by any_queued().
  std::atomic<std::size_t> queued_{0};
  std::unordered_map<std::size_t, std::vector<QueuedBytes>> spare_;
  std::size_t spare_bytes_ = 0;
};

}  // namespace collie::transport::tcp
