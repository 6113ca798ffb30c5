// A group's cache of Auto's choices, and which selection maps it has logged
// (runtime/src/collective.cpp): part of detail::Group.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include <collie/process_group.hpp>

namespace collie {

struct AutoChoices {
  // Auto's choices, by (collective, dtype size, log2 bytes, root).
  mutable std::mutex choice_mu;
  mutable std::map<std::uint64_t, Algorithm> choices;
  // The last choice, read without the lock: key << 8 | algorithm (0: none).
  mutable std::atomic<std::uint64_t> last_choice{0};
  // The collectives (bit Collective) whose selection map was logged.
  mutable std::atomic<std::uint32_t> maps_shown{0};
};

}  // namespace collie
