// A group's progress (progress.hpp), stamped with the coarse clock the
// stall watch reads.
#include "group/progress.hpp"

#include <chrono>

#include <collie/coarse_clock.hpp>

namespace collie {

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(CoarseClock::now().time_since_epoch())
      .count();
}

}  // namespace

void Progress::begin(std::uint64_t sequence, std::uint64_t fingerprint) {
  current_fingerprint.store(fingerprint, std::memory_order_relaxed);
  current_since.store(now_ns(), std::memory_order_relaxed);
  current.store(static_cast<std::int64_t>(sequence), std::memory_order_release);
}

void Progress::end(std::uint64_t sequence, std::uint64_t fingerprint) {
  finished_at.store(now_ns(), std::memory_order_relaxed);
  recent_fingerprint[sequence % kRecent].store(fingerprint, std::memory_order_relaxed);
  recent_sequence[sequence % kRecent].store(static_cast<std::int64_t>(sequence),
                                            std::memory_order_release);
  finished.store(static_cast<std::int64_t>(sequence), std::memory_order_relaxed);
  current.store(-1, std::memory_order_release);
}

}  // namespace collie
