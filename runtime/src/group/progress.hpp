// Where this rank is in one group's calls: the executor writes it as each
// call begins and ends, and the stall watch (watch/stall.hpp) reads it to
// answer other ranks' queries and to name a call that stalls.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace collie {

// One group's progress on this rank. Several calls may run at once (async
// ones, COLLIE_ASYNC_CALLS, beside a blocking one): each begins and ends on
// the thread that runs it.
struct Progress {
  // A call running now.
  struct Running {
    std::int64_t sequence = -1;  // -1: none
    std::uint64_t fingerprint = 0;
    std::int64_t since = 0;  // steady clock, ns
  };
  // The last kRecent calls that ended, by sequence % kRecent: their
  // sequence and fingerprint (for messages that come after a call ended).
  static constexpr std::size_t kRecent = 16;
  std::array<std::atomic<std::int64_t>, kRecent> recent_sequence{};
  std::array<std::atomic<std::uint64_t>, kRecent> recent_fingerprint{};
  std::atomic<std::int64_t> finished{-1};     // the highest call that ended
  std::atomic<std::int64_t> finished_at{0};  // steady clock, ns
  std::atomic<std::int64_t> started_at{0};   // the group's creation, steady clock, ns

  Progress();
  void begin(std::uint64_t sequence, std::uint64_t fingerprint);
  void end(std::uint64_t sequence, std::uint64_t fingerprint);

  // The oldest call running (sequence -1: none).
  Running oldest() const;
  // Call `sequence`, if it runs now (sequence -1: it does not).
  Running running(std::int64_t sequence) const;
  // Whether call `sequence` has ended here. Calls start in call order, so
  // one older than every call running has ended, or not started (a moment
  // between its number and its start); a later one is looked up among the
  // recent ones.
  bool ended(std::int64_t sequence) const;

 private:
  // Calls beyond kRunning at once run unseen (by the stall watch only).
  static constexpr std::size_t kRunning = 8;
  mutable std::mutex mu_;
  std::array<Running, kRunning> running_{};  // (mu_)
};

}  // namespace collie
