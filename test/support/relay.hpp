// A man in the middle, for the sealed wire's tests (the mesh's and the
// store's; on loopback, or on a namespace host): it accepts one connection on a port of its own,
// connects to the target, and copies bytes both ways, recording them all
// and changing the connector's bytes once as told.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/catch.hpp"

namespace collie::test {

// What a relay does to the bytes from the connector to the acceptor.
// Stall: the first half of the chunk goes on, then nothing more of the
// connector's (its connection stays open). FlipThenHold: a flip, then from
// the acceptor's first bytes after it the relay reads nothing more of the
// connector's (a connector with more to send waits on a full socket) and
// keeps the acceptor's until it ends its side, then passes them on and
// closes at once: the connector gets the acceptor's last words and a
// reset together.
enum class Change { None, Flip, Drop, Duplicate, Reorder, Stall, FlipThenHold };

// A man in the middle: accepts one connection on a port of its
// own, connects to `target`, and copies bytes both ways, recording them and
// changing the connector's bytes as told: the first chunk read (of 200
// bytes or more) that begins `at` bytes or more into its stream.
class Relay {
 public:
  Relay(std::uint16_t target, Change change, std::size_t at = 0)
      : Relay("127.0.0.1", "127.0.0.1", target, change, at) {}
  // Listens on `listen` (an IPv4 address of this thread's network
  // namespace, port 0) and connects to `target`:`port`; the relay's thread
  // is in the namespace of the thread that made it (a man in the middle on
  // a namespace host: support/netns.hpp).
  Relay(const std::string& listen, const std::string& target, std::uint16_t port, Change change,
        std::size_t at = 0)
      : change_(change), at_(at) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, listen.c_str(), &a.sin_addr) == 1);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listener_, 4) == 0);
    socklen_t length = sizeof a;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &length);
    port_ = ntohs(a.sin_port);
    sockaddr_in t{};
    t.sin_family = AF_INET;
    t.sin_port = htons(port);
    REQUIRE(::inet_pton(AF_INET, target.c_str(), &t.sin_addr) == 1);
    thread_ = std::thread([this, t] { run(t); });
  }
  ~Relay() {
    stop_ = true;
    thread_.join();
    ::close(listener_);
  }
  std::uint16_t port() const { return port_; }
  std::vector<std::uint8_t> captured() {
    std::lock_guard lock(mu_);
    return captured_;
  }

 private:
  void run(sockaddr_in target) {
    pollfd l{listener_, POLLIN, 0};
    while (!stop_ && ::poll(&l, 1, 50) == 0) {
    }
    if (stop_) return;
    const int in = ::accept(listener_, nullptr, nullptr);
    const int out = ::socket(AF_INET, SOCK_STREAM, 0);
    if (in < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&target), sizeof target) != 0) {
      ::close(in);
      ::close(out);
      return;
    }
    std::size_t forward = 0;  // connector's bytes seen
    bool changed = false;
    bool stalled = false;
    while (!stop_) {
      pollfd fds[2] = {{in, POLLIN, 0}, {out, POLLIN, 0}};
      if (::poll(fds, 2, 50) <= 0) continue;
      std::uint8_t buffer[65536];
      bool over = false;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
        if (n <= 0) {
          over = true;
          break;
        }
        std::vector<std::uint8_t> bytes(buffer, buffer + n);
        {
          std::lock_guard lock(mu_);
          captured_.insert(captured_.end(), bytes.begin(), bytes.end());
        }
        if (i == 0 && stalled) continue;
        if (i == 1 && changed && change_ == Change::FlipThenHold) return hold(in, out, bytes);
        if (i == 0) {
          const std::size_t start = forward;
          forward += bytes.size();
          if (!changed && change_ != Change::None && start >= at_ &&
              bytes.size() >= 200) {
            const std::size_t at = 0;
            changed = true;
            if (change_ == Change::Flip || change_ == Change::FlipThenHold) {
              bytes[at + 10] ^= 0x40;
            } else if (change_ == Change::Drop) {
              bytes.erase(bytes.begin() + static_cast<long>(at),
                          bytes.begin() + static_cast<long>(at + 100));
            } else if (change_ == Change::Duplicate) {
              bytes.insert(bytes.begin() + static_cast<long>(at + 100),
                           bytes.begin() + static_cast<long>(at),
                           bytes.begin() + static_cast<long>(at + 100));
            } else if (change_ == Change::Reorder) {
              std::rotate(bytes.begin() + static_cast<long>(at),
                          bytes.begin() + static_cast<long>(at + 50),
                          bytes.begin() + static_cast<long>(at + 100));
            } else if (change_ == Change::Stall) {
              bytes.resize(bytes.size() / 2);
              stalled = true;
            }
          }
        }
        const int to = i == 0 ? out : in;
        std::size_t sent = 0;
        while (sent < bytes.size()) {
          const ssize_t w = ::send(to, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
          if (w <= 0) break;
          sent += static_cast<std::size_t>(w);
        }
      }
      if (over) break;
    }
    ::close(in);
    ::close(out);
  }

  // FlipThenHold, from the acceptor's first bytes after the flip (`last`):
  // the acceptor's bytes kept until its side ends, then sent to the
  // connector just before both are closed (with the connector's unread
  // bytes still queued, its side is reset).
  void hold(int in, int out, std::vector<std::uint8_t> last) {
    while (!stop_) {
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      std::uint8_t buffer[65536];
      const ssize_t n = ::read(out, buffer, sizeof buffer);
      if (n <= 0) break;
      last.insert(last.end(), buffer, buffer + n);
    }
    std::size_t sent = 0;
    while (sent < last.size()) {
      const ssize_t w = ::send(in, last.data() + sent, last.size() - sent, MSG_NOSIGNAL);
      if (w <= 0) break;
      sent += static_cast<std::size_t>(w);
    }
    ::close(in);
    ::close(out);
  }

  Change change_;
  std::size_t at_;
  int listener_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::uint8_t> captured_;
};

}  // namespace collie::test
