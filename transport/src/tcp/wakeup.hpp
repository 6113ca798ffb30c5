// Wakes a thread that sleeps in poll(): an eventfd that poll() watches
// beside the sockets. (Asio's own interrupter is private to its reactor, and
// the progress loop polls native handles, not an io_context.)
#pragma once

#include <cstdint>
#include <sys/eventfd.h>
#include <unistd.h>

#include <collie/error.hpp>

namespace collie::transport::tcp {

class Wakeup {
 public:
  Wakeup() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (fd_ < 0) throw Error("cannot create an eventfd for the TCP transport's progress thread");
  }
  ~Wakeup() { ::close(fd_); }
  Wakeup(const Wakeup&) = delete;
  Wakeup& operator=(const Wakeup&) = delete;

  int fd() const { return fd_; }
  void kick() const {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto w = ::write(fd_, &one, sizeof(one));
  }
  void drain() const {
    std::uint64_t value = 0;
    [[maybe_unused]] const auto r = ::read(fd_, &value, sizeof(value));
  }

 private:
  int fd_;
};

}  // namespace collie::transport::tcp
