// Socket settings for a mesh connection, and its descriptor after the
// handshake (sockets.hpp).
#include "sockets.hpp"

#include <collie/seal.hpp>

#include <collie/transport/tcp.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string_view>

namespace collie::transport::tcp {

namespace {

// An int-valued TCP option Asio has no name for (TCP_KEEPIDLE...).
template <int Name>
class TcpOption {
 public:
  explicit TcpOption(int value) : value_(value) {}
  template <class Protocol>
  int level(const Protocol&) const {
    return IPPROTO_TCP;
  }
  template <class Protocol>
  int name(const Protocol&) const {
    return Name;
  }
  template <class Protocol>
  const int* data(const Protocol&) const {
    return &value_;
  }
  template <class Protocol>
  std::size_t size(const Protocol&) const {
    return sizeof(value_);
  }

 private:
  int value_;
};

// Between two processes on one host, a pacing congestion control (BBR, the
// default of many cloud images) only adds delay: once its bandwidth probe
// leaves start-up, it paces loopback and defers sends to a timer, and
// launches where one direction paced ran up to two and a half times
// slower; which launches did was chance. Such a connection gets the
// kernel's default algorithm instead (cubic; reno where cubic is not built
// in) unless the runtime turned this off: where a machine's ranks outnumber
// its cores, BBR's timer-paced sending measured faster
// (TcpTransport::set_host_load). docs/transport.md has the figures.

void avoid_pacing(int fd) {
  char name[32] = {};
  socklen_t length = sizeof name - 1;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &length) != 0) return;
  if (std::string_view(name).substr(0, 3) != "bbr") return;
  for (const char* other : {"cubic", "reno"}) {
    if (::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, other,
                     static_cast<socklen_t>(std::strlen(other))) == 0)
      return;
  }
}

}  // namespace

void tune(asio::ip::tcp::socket& socket, bool avoid_pacing_here) {
  // Best effort: the options are optimisations, close-on-exec cannot fail on
  // an open descriptor, and the data path asks for non-blocking calls itself
  // (MSG_DONTWAIT), whatever the descriptor's mode.
  std::error_code ignored;
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  socket.set_option(TcpOption<TCP_KEEPIDLE>(kKeepIdleS), ignored);
  socket.set_option(TcpOption<TCP_KEEPINTVL>(kKeepIntervalS), ignored);
  socket.set_option(TcpOption<TCP_KEEPCNT>(kKeepCount), ignored);
  if (seal::same_host(socket.native_handle())) {
    if (avoid_pacing_here) avoid_pacing(socket.native_handle());
    // A fixed send buffer (the kernel doubles it; autotuning grows it to
    // tcp_wmem's 4 MiB): on loopback the sender's copy into the socket
    // then lands in pages still in cache, the ones the receiver has just
    // emptied, not fresh ones: large all_reduce runs faster
    // (docs/transport.md). Not between hosts,
    // where a fixed buffer would cap what one connection carries over a
    // long path.
    socket.set_option(asio::socket_base::send_buffer_size(kSameHostSendBuffer), ignored);
  }
  set_close_on_exec(socket.native_handle());
  socket.non_blocking(true, ignored);
}

Descriptor::~Descriptor() {
  if (fd_ >= 0) ::close(fd_);
}

Descriptor& Descriptor::operator=(Descriptor&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

Descriptor release(asio::ip::tcp::socket& socket) {
  std::error_code ec;
  const int fd = socket.release(ec);
  return Descriptor(ec ? -1 : fd);
}

void set_close_on_exec(int fd) {
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

}  // namespace collie::transport::tcp
