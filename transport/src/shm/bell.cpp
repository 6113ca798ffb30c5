// The bell's futex calls (bell.hpp).
#include "bell.hpp"

#include <climits>
#include <ctime>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace collie::transport::shm {

namespace {

std::uint32_t* futex_word(std::atomic<std::uint32_t>& a) {
  return reinterpret_cast<std::uint32_t*>(&a);
}

}  // namespace

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::chrono::microseconds d) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(d.count() / 1000000);
  ts.tv_nsec = static_cast<long>((d.count() % 1000000) * 1000);
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace collie::transport::shm
