// The relay of torch's TCPStore clients to a store on another host
// (torch_relay.hpp): a thread that accepts on loopback, and one per client
// that sets up its tunnel and then copies bytes both ways until either
// side closes or the relay stops.
#include <collie/store/torch_relay.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/store/client.hpp>

#include "peer_user.hpp"
#include "protocol.hpp"
#include "sealed_channel.hpp"

namespace collie::store {

namespace {

using Clock = std::chrono::steady_clock;

// The most torch clients carried at once: each is a thread and two sockets.
constexpr std::size_t kMaxClients = 4096;

asio::ip::tcp::endpoint endpoint_of(const sockaddr_in& a) {
  return {asio::ip::address_v4(ntohl(a.sin_addr.s_addr)), ntohs(a.sin_port)};
}

// Writes all of `n` bytes; false if the socket failed or closed, or the
// relay stops (`stop_fd` readable) while the other side takes nothing, so
// that a client that never reads cannot hold the relay's destructor.
bool write_all(int fd, int stop_fd, const char* data, std::size_t n) {
  while (n > 0) {
    const ssize_t put = ::send(fd, data, n, MSG_NOSIGNAL);
    if (put < 0 && errno == EINTR) continue;
    if (put < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p[2] = {{fd, POLLOUT, 0}, {stop_fd, POLLIN, 0}};
      if (::poll(p, 2, -1) > 0 && p[1].revents != 0) return false;
      continue;
    }
    if (put <= 0) return false;
    data += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

}  // namespace

class TorchRelay::Impl {
 public:
  Impl(std::string host, std::uint16_t port, ClientOptions options)
      : host_(std::move(host)), port_(port), options_(std::move(options)) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (stop_fd_ < 0 || listen_fd_ < 0 ||
        ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::listen(listen_fd_, 128) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      const int e = errno;
      close_fds();
      throw Error(fmt::format("torch relay: cannot listen on 127.0.0.1: {}", std::strerror(e)));
    }
    listen_port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }

  ~Impl() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto ignored = ::write(stop_fd_, &one, sizeof one);
    acceptor_.join();
    std::vector<Client> clients;
    {
      std::lock_guard lock(mu_);
      clients.swap(clients_);
    }
    for (auto& c : clients)
      c.thread.join();
    close_fds();
  }

  std::uint16_t port() const { return listen_port_; }

 private:
  void close_fds() {
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (stop_fd_ >= 0) ::close(stop_fd_);
  }

  void accept_loop() {
    for (;;) {
      pollfd p[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0 && errno != EINTR) return;
      if (p[1].revents != 0) return;
      if (p[0].revents == 0) continue;
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len, SOCK_CLOEXEC);
      if (fd < 0) continue;
      if (!admit(fd, peer)) {
        ::close(fd);
        continue;
      }
      std::lock_guard lock(mu_);
      // The threads of clients that left are joined here.
      std::erase_if(clients_, [](Client& c) {
        if (!c.done->load()) return false;
        c.thread.join();
        return true;
      });
      auto done = std::make_shared<std::atomic<bool>>(false);
      clients_.push_back({std::thread([this, fd, done] {
                            carry(fd);
                            done->store(true);
                          }),
                          done});
    }
  }

  // Only this user's processes, and a bounded number of them.
  bool admit(int fd, const sockaddr_in& peer) {
    sockaddr_in local{};
    socklen_t len = sizeof local;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    const auto uid = peer_user(endpoint_of(local), endpoint_of(peer));
    if (!uid || *uid != ::geteuid()) {
      log().warn("torch relay: refused a client on loopback: {}",
                 uid ? fmt::format("it runs as uid {}, not as this relay's user (uid {})", *uid,
                                   ::geteuid())
                     : std::string("its user could not be told from /proc/net/tcp"));
      return false;
    }
    if (active_.load() >= kMaxClients) {
      log().warn("torch relay: refused a client: it carries {} already, its limit", kMaxClients);
      return false;
    }
    return true;
  }

  void carry(int client) {
    ++active_;
    TorchTunnel tunnel;
    try {
      // collie's own clients (the ranks' runtime) prove the token and seal
      // themselves: their bytes go through as they are.
      const int first = first_byte(client);
      if (first == static_cast<int>(wire::kMagic >> 24)) {
        tunnel.fd = connect_to_store();
      } else if (first >= 0) {
        tunnel = torch_tunnel();
      }
    } catch (const std::exception& e) {
      if (stopping())
        log().debug("store relay: stopped while reaching the store at {}:{}: {}", host_, port_,
                    e.what());
      else
        log().error("store relay: cannot reach the store at {}:{} for a client on loopback: {}",
                    host_, port_, e.what());
    }
    if (tunnel.fd >= 0) {
      const int on = 1;
      ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      ::setsockopt(tunnel.fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
      pump(client, tunnel.fd, tunnel.sealed.get());
      ::close(tunnel.fd);
    }
    ::close(client);
    --active_;
  }

  // The client's first byte, left in its socket; -1 if it sent none in time.
  int first_byte(int fd) {
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(p, 2, 60000) <= 0 || p[1].revents != 0) return -1;
    unsigned char byte = 0;
    return ::recv(fd, &byte, 1, MSG_PEEK) == 1 ? byte : -1;
  }

  bool stopping() const {
    pollfd p{stop_fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  Clock::time_point connect_deadline() const {
    return Clock::now() + options_.connect_timeout.value_or(options_.timeout);
  }

  // A torch client's tunnel to the store, tried until the options' connect
  // timeout in windows of at most a second: a relay that is stopped (the
  // launcher's next round, whose store is elsewhere) gives up within one,
  // whatever became of the store it was carrying clients to.
  TorchTunnel torch_tunnel() {
    const auto deadline = connect_deadline();
    for (;;) {
      auto window = options_;
      window.connect_timeout = std::clamp(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()),
          std::chrono::milliseconds(1), std::chrono::milliseconds(1000));
      try {
        StoreClient store(host_, port_, window);
        return store.into_torch_tunnel();
      } catch (const ConnectionError&) {
        if (stopping() || Clock::now() >= deadline) throw;
      } catch (const TimeoutError&) {
        if (stopping() || Clock::now() >= deadline) throw;
      }
    }
  }

  // A plain TCP connection to the store: one attempt, which the relay's
  // stop or the connect timeout ends.
  int connect_to_store() {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const auto service = std::to_string(port_);
    if (const int e = ::getaddrinfo(host_.c_str(), service.c_str(), &hints, &found); e != 0)
      throw Error(fmt::format("cannot resolve {}: {}", host_, ::gai_strerror(e)));
    int fd = -1;
    int error = 0;
    const auto deadline = connect_deadline();
    for (auto* a = found; a != nullptr && fd < 0; a = a->ai_next) {
      fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
      if (fd < 0) {
        error = errno;
        continue;
      }
      error = connected(fd, a, deadline);
      if (error != 0) {
        ::close(fd);
        fd = -1;
      }
    }
    ::freeaddrinfo(found);
    if (fd < 0) throw Error(fmt::format("cannot connect: {}", std::strerror(error)));
    return fd;
  }

  // Connects the non-blocking `fd` to `a`: 0, or the errno that ended it
  // (ETIMEDOUT at the deadline, ECANCELED when the relay stops).
  int connected(int fd, const addrinfo* a, Clock::time_point deadline) {
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) return 0;
    if (errno != EINPROGRESS) return errno;
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return ETIMEDOUT;
      pollfd p[2] = {{fd, POLLOUT, 0}, {stop_fd_, POLLIN, 0}};
      const int n = ::poll(p, 2, static_cast<int>(std::min<std::int64_t>(left.count(), 1000)));
      if (n < 0 && errno != EINTR) return errno;
      if (p[1].revents != 0) return ECANCELED;
      if (p[0].revents == 0) continue;
      int error = 0;
      socklen_t len = sizeof error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len);
      return error;
    }
  }

  // Copies what either side sends to the other until one closes; the
  // tunnel's (`b`'s) bytes through `sealed` where it is sealed.
  void pump(int a, int b, SealedChannel* sealed) {
    std::vector<char> buffer(1 << 16);
    for (;;) {
      pollfd p[3] = {{a, POLLIN, 0}, {b, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
      // Plaintext already opened is copied before waiting for more.
      const bool opened = sealed != nullptr && sealed->has_unread();
      if (::poll(p, 3, opened ? 0 : -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[2].revents != 0) return;
      if (opened) p[1].revents |= POLLIN;
      for (int i = 0; i < 2; ++i) {
        if (p[i].revents == 0) continue;
        const int from = i == 0 ? a : b;
        const int to = i == 0 ? b : a;
        if (i == 1 && sealed != nullptr) {
          std::error_code ec;
          const std::size_t got = sealed->read_some(
              b, std::span(reinterpret_cast<std::uint8_t*>(buffer.data()), buffer.size()), ec);
          if (ec == asio::error::would_block) continue;
          if (ec) {
            if (ec == std::errc::bad_message)
              log().warn("store relay: the store's sealed stream broke: {}", sealed->failure());
            return;
          }
          if (!write_all(a, stop_fd_, buffer.data(), got)) return;
          continue;
        }
        const ssize_t got = ::recv(from, buffer.data(), buffer.size(), MSG_DONTWAIT);
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
        if (got <= 0) return;
        if (i == 0 && sealed != nullptr) {
          const asio::const_buffer plain(buffer.data(), static_cast<std::size_t>(got));
          for (std::size_t done = 0; done < plain.size();) {
            std::size_t n = 0;
            const auto records = sealed->seal_next(std::span(&plain, 1), done, n);
            if (!write_all(b, stop_fd_, reinterpret_cast<const char*>(records.data()),
                           records.size()))
              return;
            done += n;
          }
          sealed->written();
          continue;
        }
        if (!write_all(to, stop_fd_, buffer.data(), static_cast<std::size_t>(got))) return;
      }
    }
  }

  std::string host_;
  std::uint16_t port_;
  ClientOptions options_;
  int stop_fd_ = -1;
  int listen_fd_ = -1;
  std::uint16_t listen_port_ = 0;
  std::atomic<std::size_t> active_{0};
  struct Client {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::mutex mu_;
  std::vector<Client> clients_;
  std::thread acceptor_;
};

TorchRelay::TorchRelay(std::string host, std::uint16_t port, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(options))) {}

TorchRelay::~TorchRelay() = default;

std::uint16_t TorchRelay::port() const {
  return impl_->port();
}

}  // namespace collie::store
