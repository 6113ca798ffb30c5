// A deadline as poll(2) and epoll_wait(2) take it: the milliseconds left,
// rounded up so that a wait never ends just before its deadline and spins.
#pragma once

#include <algorithm>
#include <chrono>

namespace collie {

// 0 once `deadline` has passed; at most 2^30 (about 12 days), so that the
// count fits an int.
inline int poll_ms_until(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<long long>(left.count(), 0, 1 << 30));
}

}  // namespace collie
