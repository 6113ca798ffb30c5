// Where this rank is in one group's calls: the executor writes it as each
// call begins and ends, and the stall watch (watch/stall.hpp) reads it to
// answer other ranks' queries and to name a call that stalls.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace collie {

// One group's progress on this rank. Written by the thread running the
// group's calls, read by the responder: each field is consistent on its
// own, which is all a report needs.
struct Progress {
  std::atomic<std::int64_t> current{-1};  // the call running now; -1: none
  std::atomic<std::uint64_t> current_fingerprint{0};
  std::atomic<std::int64_t> current_since{0};  // steady clock, ns
  std::atomic<std::int64_t> finished{-1};      // the last call that ended
  // The last kRecent calls that ended, by sequence % kRecent: their
  // sequence and fingerprint (for messages that come after a call ended).
  static constexpr std::size_t kRecent = 4;
  std::array<std::atomic<std::int64_t>, kRecent> recent_sequence{-1, -1, -1, -1};
  std::array<std::atomic<std::uint64_t>, kRecent> recent_fingerprint{};
  std::atomic<std::int64_t> finished_at{0};  // steady clock, ns
  std::atomic<std::int64_t> started_at{0};   // the group's creation, steady clock, ns

  void begin(std::uint64_t sequence, std::uint64_t fingerprint);
  void end(std::uint64_t sequence, std::uint64_t fingerprint);
};

}  // namespace collie
