// A clock for deadlines and reports counted in milliseconds or more: the
// kernel's CLOCK_MONOTONIC_COARSE, which is steady_clock's own clock
// (CLOCK_MONOTONIC) as of the last tick (1 to 4 ms behind), read for a
// fraction of the cost (about 5 ns, against 20 ns or more for
// steady_clock in a virtual machine). Its time points are steady_clock's,
// so they mix with it. A small collective reads the clock several times;
// only what needs microseconds (a spin's end) reads the precise one.
#pragma once

#include <chrono>
#include <ctime>

namespace collie {

struct CoarseClock {
  using Clock = std::chrono::steady_clock;
  static Clock::time_point now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(
        std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
  }
};

}  // namespace collie
