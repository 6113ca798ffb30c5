// What every peer connection's socket gets, on either side of the handshake,
// and what it becomes after it: a plain descriptor for the data path.
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include <asio/ip/tcp.hpp>

namespace collie::transport::tcp {

// A connected socket's descriptor, owned: closed when destroyed. Asio
// connects and runs the handshake; then the socket leaves Asio (release())
// and the data path reads and writes the descriptor with recvmsg/sendmsg.
// An Asio socket stays registered with its io_context's epoll set for its
// whole life, and every segment that arrives then also runs epoll's wakeup
// callback, though nobody waits on that set: measured, that costs 2% of
// the 8 B latency and 4% of the 64 MiB bandwidth (docs/transport.md).
class Descriptor {
 public:
  Descriptor() = default;
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor();
  Descriptor(Descriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Descriptor& operator=(Descriptor&& other) noexcept;
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// Takes the descriptor out of `socket` (and out of Asio's reactor); the
// socket is closed afterwards. Settings made with tune() stay.
Descriptor release(asio::ip::tcp::socket& socket);

// How a lost host is noticed (docs/failures.md), within about 3 s: an idle
// connection sends keep-alive probes after kKeepIdleS seconds, kKeepCount
// of them kKeepIntervalS apart, and fails when none is answered; a
// connection with data unacknowledged and retransmitting for kLostAfter, or
// with data queued behind a closed receive window whose probes have gone
// unanswered that long (keep-alive does not probe such a connection), is
// failed by the transport (PeerStream::check_alive, every kCheckAliveEvery,
// from tcp_health(), flow_stats.hpp,
// for the pair's connection and each sending lane). A connection not read
// for a while (paused, or waiting on lanes) stays in poll()'s set, so its
// keep-alive failure is heard.
// A live host's kernel acknowledges within a round trip however busy its
// processes are, so only a host gone silent (or a network cut that long)
// waits out these times; 3 s is past the kernel's own point of doubt
// (tcp_retries1: 3 retransmissions, about 3 s at the minimal timeout).
// TCP_USER_TIMEOUT is not used: since Linux 5.11 it also drops a
// connection whose receiver keeps a zero window that long, so a rank
// stopped in a debugger would lose its connections while its peers send
// to it.
inline constexpr int kKeepIdleS = 1;
inline constexpr int kKeepIntervalS = 1;
inline constexpr int kKeepCount = 2;
inline constexpr std::chrono::seconds kLostAfter{3};
inline constexpr std::chrono::milliseconds kCheckAliveEvery{500};

// SO_SNDBUF of a connection between two processes of one host (the kernel
// doubles it: 768 KiB in all).
inline constexpr int kSameHostSendBuffer = 384 * 1024;

// The settings of docs/transport.md: TCP_NODELAY, keep-alive probes (above),
// close-on-exec, non-blocking; between processes of one host, cubic where
// the host's algorithm is BBR (unless `avoid_pacing` is false: where ranks
// outnumber processors) and a fixed send buffer. Asio opens
// sockets without close-on-exec, so it is set here, right after: a child
// process a rank starts must not hold a peer's connection open (a dead
// rank's end-of-stream would never come).
void tune(asio::ip::tcp::socket& socket, bool avoid_pacing);

// Sets close-on-exec on a descriptor Asio opened (it sets none itself).
void set_close_on_exec(int fd);

}  // namespace collie::transport::tcp
