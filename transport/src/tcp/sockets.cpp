#include "sockets.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <collie/address.hpp>

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

}  // namespace

void tune(asio::ip::tcp::socket& socket) {
  std::error_code ignored;  // best effort, as every setting here is an optimisation
  socket.set_option(asio::ip::tcp::no_delay(true), ignored);
  socket.set_option(asio::socket_base::keep_alive(true), ignored);
  socket.set_option(TcpOption<TCP_KEEPIDLE>(30), ignored);
  socket.set_option(TcpOption<TCP_KEEPINTVL>(5), ignored);
  socket.set_option(TcpOption<TCP_KEEPCNT>(3), ignored);
  ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
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

std::string endpoint_text(const asio::ip::tcp::endpoint& endpoint) {
  return join_host_port(endpoint.address().to_string(), endpoint.port());
}

}  // namespace collie::transport::tcp
