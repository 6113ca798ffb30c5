// Whether a group is broken (a collective failed leaving messages in
// flight), and why: part of detail::Group.
#pragma once

#include <atomic>
#include <mutex>
#include <string>

namespace collie {

struct BrokenState {
  // Set once a collective failed in a way that leaves messages in flight.
  std::mutex broken_mu;
  std::string broken;
  std::atomic<bool> is_broken{false};  // !broken.empty(), read without the lock
};

}  // namespace collie
