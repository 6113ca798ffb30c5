// A plain TCP connection a test speaks the store's protocol over
// (raw_connection.hpp).
#include "raw_connection.hpp"

#include <collie/seal.hpp>

#include <netinet/in.h>
#include <stdexcept>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <asio/connect.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "auth.hpp"
#include "store_fixture.hpp"

namespace collie::test {

using asio::ip::tcp;

RawConnection::RawConnection(std::uint16_t port, const std::string& host, const std::string& source)
    : socket_(io_) {
  tcp::resolver resolver(io_);
  if (source.empty()) {
    asio::connect(socket_, resolver.resolve(host, std::to_string(port)));
  } else {
    const auto from = asio::ip::make_address(source);
    socket_.open(from.is_v4() ? tcp::v4() : tcp::v6());
    socket_.bind(tcp::endpoint(from, 0));
    socket_.connect(tcp::endpoint(asio::ip::make_address(host), port));
  }
  socket_.set_option(tcp::no_delay(true));
}

std::optional<store::wire::AuthStatus> RawConnection::authenticate(
    const std::string& token, std::chrono::milliseconds timeout) {
  store::wire::ClientHello hello;
  hello.has_token = !token.empty();
  hello.nonce = store::auth::random_nonce();
  // In the clear: a store that seals this connection refuses it (status 3).
  hello.sealing = seal::sealing_field(false, seal::Mode::Off);
  const auto sent = store::wire::encode(hello);
  send(sent);
  auto reply = read_exactly(store::wire::kServerHelloBytes, timeout);
  if (!reply) return std::nullopt;
  const std::span<const std::uint8_t, store::wire::kServerHelloBytes> server(reply->data(),
                                                                            reply->size());
  const auto proof = token.empty()
                         ? store::wire::Proof{}
                         : store::auth::handshake_keys(token, sent, server, nullptr).connector_proof;
  send(std::vector<std::uint8_t>(proof.begin(), proof.end()));
  auto status = read_exactly(1, timeout);
  if (!status) return std::nullopt;
  return static_cast<store::wire::AuthStatus>((*status)[0]);
}

void RawConnection::send(std::span<const std::uint8_t> bytes) {
  asio::write(socket_, asio::buffer(bytes.data(), bytes.size()));
}

store::wire::ServerHello RawConnection::handshake() {
  store::wire::ClientHello hello;
  const auto bytes = store::wire::encode(hello);
  send(bytes);
  auto reply = read_exactly(store::wire::kServerHelloBytes, std::chrono::seconds(10));
  if (!reply) throw std::runtime_error("raw connection: no server hello");
  return store::wire::decode_server_hello(
      std::span<const std::uint8_t, store::wire::kServerHelloBytes>(reply->data(), reply->size()));
}

std::optional<std::vector<std::uint8_t>> RawConnection::read_exactly(
    std::size_t n, std::chrono::milliseconds timeout) {
  std::vector<std::uint8_t> out(n);
  std::optional<std::error_code> result;
  asio::async_read(socket_, asio::buffer(out),
                   [&](std::error_code ec, std::size_t) { result = ec; });
  io_.restart();
  io_.run_for(timeout);
  if (!result) {
    socket_.cancel();
    io_.restart();
    io_.run();
    return std::nullopt;
  }
  if (*result) return std::nullopt;
  return out;
}

std::optional<std::vector<std::uint8_t>> RawConnection::read_frame(
    std::chrono::milliseconds timeout) {
  auto header = read_exactly(4, timeout);
  if (!header) return std::nullopt;
  return read_exactly(store::wire::get_u32(header->data()), timeout);
}

bool RawConnection::closed_by_peer(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::uint8_t byte = 0;
    std::optional<std::error_code> result;
    socket_.async_read_some(asio::buffer(&byte, 1),
                            [&](std::error_code ec, std::size_t) { result = ec; });
    io_.restart();
    io_.run_until(deadline);
    if (!result) {
      socket_.cancel();
      io_.restart();
      io_.run();
      return false;
    }
    if (*result) return true;  // EOF or reset
  }
  return false;
}

std::uint16_t momentarily_free_port() {
  asio::io_context io;
  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
  return acceptor.local_endpoint().port();
}

RefusingPort::RefusingPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("RefusingPort: socket failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    ::close(fd_);
    throw std::runtime_error("RefusingPort: bind failed");
  }
  port_ = ntohs(a.sin_port);
}

RefusingPort::~RefusingPort() {
  ::close(fd_);
}

bool ipv6_loopback_available() {
  asio::io_context io;
  std::error_code ec;
  tcp::acceptor acceptor(io);
  acceptor.open(tcp::v6(), ec);
  if (!ec) acceptor.bind(tcp::endpoint(asio::ip::address_v6::loopback(), 0), ec);
  return !ec;
}

std::size_t RawConnection::unread() const {
  int bytes = 0;
  if (::ioctl(const_cast<asio::ip::tcp::socket&>(socket_).native_handle(), FIONREAD, &bytes) != 0)
    return 0;
  return static_cast<std::size_t>(bytes);
}

}  // namespace collie::test
