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

Progress::Progress() {
  for (auto& s : recent_sequence)
    s.store(-1, std::memory_order_relaxed);
}

void Progress::begin(std::uint64_t sequence, std::uint64_t fingerprint) {
  const auto since = now_ns();
  std::lock_guard lock(mu_);
  for (auto& r : running_) {
    if (r.sequence >= 0) continue;
    r = {static_cast<std::int64_t>(sequence), fingerprint, since};
    return;
  }
}

void Progress::end(std::uint64_t sequence, std::uint64_t fingerprint) {
  finished_at.store(now_ns(), std::memory_order_relaxed);
  recent_fingerprint[sequence % kRecent].store(fingerprint, std::memory_order_relaxed);
  recent_sequence[sequence % kRecent].store(static_cast<std::int64_t>(sequence),
                                            std::memory_order_release);
  const auto s = static_cast<std::int64_t>(sequence);
  std::lock_guard lock(mu_);
  if (finished.load(std::memory_order_relaxed) < s) finished.store(s, std::memory_order_relaxed);
  for (auto& r : running_) {
    if (r.sequence == s) r.sequence = -1;
  }
}

Progress::Running Progress::oldest() const {
  std::lock_guard lock(mu_);
  Running oldest;
  for (const auto& r : running_) {
    if (r.sequence >= 0 && (oldest.sequence < 0 || r.sequence < oldest.sequence)) oldest = r;
  }
  return oldest;
}

Progress::Running Progress::running(std::int64_t sequence) const {
  std::lock_guard lock(mu_);
  for (const auto& r : running_) {
    if (r.sequence == sequence && sequence >= 0) return r;
  }
  return {};
}

bool Progress::ended(std::int64_t sequence) const {
  if (recent_sequence[static_cast<std::uint64_t>(sequence) % kRecent].load(
          std::memory_order_acquire) == sequence)
    return true;
  std::lock_guard lock(mu_);
  if (finished.load(std::memory_order_relaxed) < sequence) return false;
  for (const auto& r : running_) {
    if (r.sequence >= 0 && r.sequence <= sequence) return false;
  }
  return true;
}

}  // namespace collie
