#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/duration.hpp>
#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/transport/mesh.hpp>

#include "wire.hpp"

namespace collie::transport {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

enum class State : int { Pending = 0, Done = 1, Failed = 2 };
enum class ErrorKind { None, Connection, Protocol, Request, Timeout };

constexpr std::size_t kStagingBytes = 64 * 1024;
constexpr std::size_t kDirectReadMin = 4096;  // smaller payloads go through the staging buffer
constexpr int kMaxIov = 64;

std::string errno_text(int e) {
  return std::strerror(e);
}

std::string sockaddr_text(const sockaddr_storage& ss) {
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof(ss), host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "?";
  }
  return join_host_port(host, static_cast<std::uint16_t>(std::atoi(serv)));
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int idle = 30;
  int interval = 5;
  int count = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

// Blocking-with-deadline I/O on a non-blocking socket (the connector's side
// of the handshake). Returns an error text, or "" on success.
std::string read_exact(int fd, std::uint8_t* out, std::size_t n, Clock::time_point deadline) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::recv(fd, out + got, n - got, 0);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) return "the peer closed the connection during the handshake";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errno_text(errno);
    pollfd p{fd, POLLIN, 0};
    const int ms = remaining_ms(deadline);
    if (ms == 0) return "no handshake reply in time";
    ::poll(&p, 1, ms);
  }
  return "";
}

std::string write_exact(int fd, const std::uint8_t* data, std::size_t n,
                        Clock::time_point deadline) {
  std::size_t put = 0;
  while (put < n) {
    const ssize_t w = ::send(fd, data + put, n - put, MSG_NOSIGNAL);
    if (w > 0) {
      put += static_cast<std::size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return errno_text(errno);
    pollfd p{fd, POLLOUT, 0};
    const int ms = remaining_ms(deadline);
    if (ms == 0) return "the handshake could not be sent in time";
    ::poll(&p, 1, ms);
  }
  return "";
}

void kick(int event_fd) {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto w = ::write(event_fd, &one, sizeof(one));
}

void drain(int event_fd) {
  std::uint64_t value = 0;
  [[maybe_unused]] const auto r = ::read(event_fd, &value, sizeof(value));
}

std::string plural_bytes(std::size_t n) {
  return fmt::format("{} byte{}", n, n == 1 ? "" : "s");
}

}  // namespace

struct Request {
  bool is_send = false;
  int peer = 0;
  std::uint64_t tag = 0;
  std::byte* data = nullptr;
  std::size_t bytes = 0;
  std::uint64_t fingerprint = 0;  // send: attached; receive: received
  std::atomic<int> state{static_cast<int>(State::Pending)};
  // Guarded by Mesh::Impl::mu; read without it only after state is final.
  std::size_t moved = 0;  // payload bytes
  bool header_built = false;
  std::size_t header_sent = 0;
  std::array<std::uint8_t, wire::kHeaderBytes> header{};
  ErrorKind error_kind = ErrorKind::None;
  std::string error;
};

namespace {

struct Unexpected {
  std::uint64_t fingerprint = 0;
  std::size_t length = 0;
  std::unique_ptr<std::byte[]> data;
  std::size_t got = 0;
  bool complete = false;
};

enum class PeerState { Unconnected, Connecting, Ready, Failed };
enum class Rx { Header, Payload, Paused };

struct Peer {
  int rank = 0;
  PeerState state = PeerState::Unconnected;
  int fd = -1;
  std::string published;  // host:port it listens on, from the store
  std::string address;    // host:port of its end of an accepted connection
  std::string failure;
  ErrorKind failure_kind = ErrorKind::None;
  // Sending.
  std::deque<RequestPtr> sends;
  std::uint64_t send_sequence = 0;
  // Receiving.
  std::vector<std::uint8_t> staging;
  std::size_t staged_begin = 0;
  std::size_t staged_end = 0;
  Rx rx = Rx::Header;
  wire::Header current{};
  std::size_t current_got = 0;
  RequestPtr current_recv;
  std::shared_ptr<Unexpected> current_unexpected;
  std::uint64_t recv_sequence = 0;
  std::unordered_map<std::uint64_t, std::deque<RequestPtr>> posted;
  std::unordered_map<std::uint64_t, std::deque<std::shared_ptr<Unexpected>>> unexpected;
};

// The first entry queued under `tag` (removed), or an empty pointer.
template <class Map>
typename Map::mapped_type::value_type take_first(Map& map, std::uint64_t tag) {
  auto it = map.find(tag);
  if (it == map.end() || it->second.empty()) return {};
  auto first = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) map.erase(it);
  return first;
}

struct Handshake {
  int fd = -1;
  std::string remote;
  wire::Nonce nonce{};
  std::array<std::uint8_t, wire::kHelloBytes> buffer{};
  std::size_t got = 0;
  Clock::time_point deadline;
};

}  // namespace

struct Mesh::Impl {
  explicit Impl(const MeshOptions& o) : opt(o) {}

  const MeshOptions& opt;
  std::shared_ptr<store::Store> store;
  mutable std::mutex mu;             // every Peer, every Request's guarded fields, socket I/O
  std::condition_variable state_cv;  // a peer's state changed (with mu)
  std::vector<Peer> peers;
  std::vector<int> connected;  // ranks with a socket, in the order they connected: what is polled
  std::size_t unexpected_bytes = 0;
  // Payload buffers of unexpected messages, kept for the next ones (a
  // pipelined collective sends many of one size): no allocation, no page
  // faults per message. At most kSparePayloadBytes in all.
  std::unordered_map<std::size_t, std::vector<std::unique_ptr<std::byte[]>>> spare_payloads;
  std::size_t spare_payload_bytes = 0;
  static constexpr std::size_t kSparePayloadBytes = std::size_t{16} << 20;

  // A buffer for `n` bytes (mu held).
  std::unique_ptr<std::byte[]> take_payload(std::size_t n) {
    if (auto it = spare_payloads.find(n); it != spare_payloads.end() && !it->second.empty()) {
      auto buffer = std::move(it->second.back());
      it->second.pop_back();
      spare_payload_bytes -= n;
      return buffer;
    }
    return std::unique_ptr<std::byte[]>(new std::byte[std::max<std::size_t>(n, 1)]);
  }
  // Keeps a consumed payload buffer of `n` bytes for reuse (mu held).
  void give_payload(std::unique_ptr<std::byte[]> buffer, std::size_t n) {
    if (n < 4096 || spare_payload_bytes + n > kSparePayloadBytes) return;
    spare_payload_bytes += n;
    spare_payloads[n].push_back(std::move(buffer));
  }
  std::size_t paused_peers = 0;         // peers whose reading waits for queue space or a receive
  std::atomic<std::size_t> pending{0};  // requests not finished (changed under mu)
  std::mutex drive_mu;                  // held by the one thread that polls the peers' sockets
  std::atomic<int> waiters{0};
  std::mutex done_mu;
  std::condition_variable done_cv;  // some request finished
  int listen_fd = -1;
  int background_wake = -1;
  int driver_wake = -1;
  std::string address;
  std::atomic<bool> stopping{false};
  std::vector<Handshake> handshakes;  // the background thread's alone
  std::thread background;

  std::string key(int rank) const { return fmt::format("{}/addr/{}", opt.group, rank); }

  std::string describe_peer_locked(int rank) const {
    const auto& p = peers[static_cast<std::size_t>(rank)];
    if (rank == opt.rank) return fmt::format("rank {} (itself)", rank);
    const auto& where = p.published.empty() ? p.address : p.published;
    if (where.empty()) return fmt::format("rank {}", rank);
    return fmt::format("rank {} at {}", rank, where);
  }

  // "rank 0: recv from rank 1 at 10.0.0.5:41234 (tag 3, 1024 bytes)"
  std::string describe_request(const Request& r) const {
    return fmt::format("rank {}: {} {} {} (tag {}, {})", opt.rank, r.is_send ? "send" : "recv",
                       r.is_send ? "to" : "from", describe_peer_locked(r.peer), r.tag,
                       plural_bytes(r.bytes));
  }

  // Fails a receive that was matched with a message of another length
  // (keeping the message's fingerprint: it may say why the sizes differ).
  void fail_size_mismatch(Request& r, std::size_t sent, std::uint64_t fingerprint) {
    r.fingerprint = fingerprint;
    fail(r, ErrorKind::Request,
         fmt::format("{} failed: {} sent a message of {} with this tag; the receive expected {} "
                     "(the message was dropped)",
                     describe_request(r), describe_peer_locked(r.peer), plural_bytes(sent),
                     plural_bytes(r.bytes)));
  }

  std::string progress_text(const Request& r) const {
    return fmt::format("{} of {} {}", r.moved, plural_bytes(r.bytes),
                       r.is_send ? "sent" : "received");
  }

  // ---- completion (mu held) ----

  void finish(Request& r, State s) {
    r.state.store(static_cast<int>(s), std::memory_order_release);
    --pending;
    done_cv.notify_all();
  }
  void complete(Request& r) { finish(r, State::Done); }
  void fail(Request& r, ErrorKind kind, std::string message) {
    if (r.state.load(std::memory_order_relaxed) != static_cast<int>(State::Pending)) return;
    r.error_kind = kind;
    r.error = std::move(message);
    finish(r, State::Failed);
  }

  // Wakes whoever polls the peers now so that it sees new work: the waiting
  // thread that drives them, else the background thread. (A waiter that
  // leaves while work is pending wakes the background thread itself.)
  // Fails `r` because its peer failed (or went away) for `reason`.
  void fail_for_peer(Request& r, ErrorKind kind, const std::string& reason) {
    fail(r, kind, fmt::format("{} failed: {} ({})", describe_request(r), reason, progress_text(r)));
  }

  void wake_pollers() { kick(waiters.load() > 0 ? driver_wake : background_wake); }

  void fail_peer(Peer& p, ErrorKind kind, const std::string& reason) {
    if (p.state == PeerState::Failed) return;
    const bool affects_work = !p.sends.empty() || !p.posted.empty() || p.current_recv;
    // A peer that closes with nothing pending may simply have finished.
    collie::log().log(affects_work ? spdlog::level::warn : spdlog::level::debug, "rank {}: {}",
                      opt.rank, reason);
    p.state = PeerState::Failed;
    if (p.rx == Rx::Paused) --paused_peers;
    p.rx = Rx::Header;
    p.failure = reason;
    p.failure_kind = kind;
    if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);  // closed in the destructor: pollers may hold it
    for (auto& r : p.sends)
      fail_for_peer(*r, kind, reason);
    p.sends.clear();
    if (p.current_recv) {
      fail_for_peer(*p.current_recv, kind, reason);
      p.current_recv.reset();
    }
    if (p.current_unexpected && !p.current_unexpected->complete) {
      auto& q = p.unexpected[p.current.tag];
      std::erase(q, p.current_unexpected);
      unexpected_bytes -= p.current_unexpected->length;
      p.current_unexpected.reset();
    }
    for (auto& [tag, q] : p.posted)
      for (auto& r : q)
        fail_for_peer(*r, kind, reason);
    p.posted.clear();
    state_cv.notify_all();
    wake_pollers();
  }

  std::string closed_reason(const Peer& p) const {
    return fmt::format("{} closed the connection (it exited, crashed or was killed)",
                       describe_peer_locked(p.rank));
  }

  // ---- receiving (mu held) ----

  std::size_t current_remaining(const Peer& p) const { return p.current.length - p.current_got; }

  std::byte* current_target(Peer& p) {
    if (p.current_recv) return p.current_recv->data;
    if (p.current_unexpected) return p.current_unexpected->data.get();
    return nullptr;  // discarding
  }

  void finish_message(Peer& p) {
    if (p.current_recv) {
      complete(*p.current_recv);
      p.current_recv.reset();
    }
    if (p.current_unexpected) {
      p.current_unexpected->complete = true;
      p.current_unexpected.reset();
    }
    p.rx = Rx::Header;
  }

  void account(Peer& p, std::size_t n) {
    p.current_got += n;
    if (p.current_recv) p.current_recv->moved = p.current_got;
    if (p.current_unexpected) p.current_unexpected->got = p.current_got;
    if (p.current_got == p.current.length) finish_message(p);
  }

  // Matches the message whose header is p.current to a posted receive, or
  // queues it as unexpected, or pauses the peer when the queue is full.
  void begin_message(Peer& p) {
    const auto& h = p.current;
    if (p.rx == Rx::Paused) --paused_peers;  // trying again
    p.current_got = 0;
    p.current_recv.reset();
    p.current_unexpected.reset();
    if (auto r = take_first(p.posted, h.tag)) {
      if (r->bytes != h.length) {
        fail_size_mismatch(*r, h.length, h.fingerprint);
      } else {
        r->fingerprint = h.fingerprint;
        p.current_recv = std::move(r);
      }
    } else {
      if (h.length > 0 && unexpected_bytes + h.length > opt.max_unexpected_bytes) {
        p.rx = Rx::Paused;
        ++paused_peers;
        collie::log().debug("rank {}: pausing reads from rank {}: unexpected-message queue full",
                            opt.rank, p.rank);
        return;
      }
      auto u = std::make_shared<Unexpected>();
      u->fingerprint = h.fingerprint;
      u->length = h.length;
      u->data = take_payload(h.length);
      unexpected_bytes += h.length;
      p.unexpected[h.tag].push_back(u);
      p.current_unexpected = std::move(u);
    }
    p.rx = Rx::Payload;
    if (h.length == 0) finish_message(p);
  }

  // Consumes the staging buffer. False if the peer paused or failed.
  bool parse_staged(Peer& p) {
    for (;;) {
      if (p.state != PeerState::Ready) return false;
      if (p.rx == Rx::Paused) return false;
      const std::size_t avail = p.staged_end - p.staged_begin;
      if (p.rx == Rx::Header) {
        if (avail < wire::kHeaderBytes) return true;
        p.current = wire::decode_header(p.staging.data() + p.staged_begin);
        p.staged_begin += wire::kHeaderBytes;
        if (p.current.sequence != p.recv_sequence) {
          fail_peer(p, ErrorKind::Protocol,
                    fmt::format("{} broke the protocol: message number {} arrived, {} was next",
                                describe_peer_locked(p.rank), p.current.sequence, p.recv_sequence));
          return false;
        }
        ++p.recv_sequence;
        begin_message(p);
        continue;
      }
      if (avail == 0) return true;
      const std::size_t take = std::min(avail, current_remaining(p));
      if (auto* target = current_target(p)) {
        std::memcpy(target + p.current_got, p.staging.data() + p.staged_begin, take);
      }
      p.staged_begin += take;
      account(p, take);
    }
  }

  // Reads what the socket has. Payloads of a few KiB and more go straight
  // into their destination; headers and small payloads through staging.
  void receive(Peer& p) {
    for (;;) {
      if (!parse_staged(p)) return;
      if (p.staged_begin == p.staged_end) p.staged_begin = p.staged_end = 0;
      ssize_t n = 0;
      std::size_t asked = 0;
      auto* target = current_target(p);
      if (p.rx == Rx::Payload && p.staged_begin == p.staged_end && target != nullptr &&
          current_remaining(p) >= kDirectReadMin) {
        iovec iov[2] = {{target + p.current_got, current_remaining(p)},
                        {p.staging.data(), p.staging.size()}};
        asked = iov[0].iov_len + iov[1].iov_len;
        n = ::readv(p.fd, iov, 2);
        if (n > 0) {
          const std::size_t direct = std::min(static_cast<std::size_t>(n), current_remaining(p));
          p.staged_begin = 0;
          p.staged_end = static_cast<std::size_t>(n) - direct;
          account(p, direct);
        }
      } else {
        if (p.staged_begin > 0) {
          std::memmove(p.staging.data(), p.staging.data() + p.staged_begin,
                       p.staged_end - p.staged_begin);
          p.staged_end -= p.staged_begin;
          p.staged_begin = 0;
        }
        asked = p.staging.size() - p.staged_end;
        n = ::recv(p.fd, p.staging.data() + p.staged_end, asked, 0);
        if (n > 0) p.staged_end += static_cast<std::size_t>(n);
      }
      if (n == 0) {
        fail_peer(p, ErrorKind::Connection, closed_reason(p));
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail_peer(p, ErrorKind::Connection,
                  fmt::format("the connection to {} failed: {}", describe_peer_locked(p.rank),
                              errno_text(errno)));
        return;
      }
      if (static_cast<std::size_t>(n) < asked) {  // drained: parse and stop
        parse_staged(p);
        return;
      }
    }
  }

  // Frees queue space: paused peers may continue.
  void resume_paused() {
    if (paused_peers == 0) return;  // the common case: nothing to scan
    for (int rank : connected) {
      auto& p = peers[static_cast<std::size_t>(rank)];
      if (p.state == PeerState::Ready && p.rx == Rx::Paused) {
        begin_message(p);
        if (p.rx != Rx::Paused && p.fd >= 0) {
          receive(p);
          wake_pollers();
        }
      }
    }
  }

  // ---- sending (mu held) ----

  void flush(Peer& p) {
    while (!p.sends.empty() && p.state == PeerState::Ready) {
      iovec iov[kMaxIov];
      int n = 0;
      std::size_t asked = 0;
      for (auto& r : p.sends) {
        if (n + 2 > kMaxIov) break;
        if (!r->header_built) {
          wire::encode(wire::Header{r->tag, p.send_sequence++, r->bytes, r->fingerprint},
                       r->header.data());
          r->header_built = true;
        }
        if (r->header_sent < wire::kHeaderBytes) {
          iov[n++] = {r->header.data() + r->header_sent, wire::kHeaderBytes - r->header_sent};
        }
        if (r->moved < r->bytes) iov[n++] = {r->data + r->moved, r->bytes - r->moved};
      }
      for (int i = 0; i < n; ++i)
        asked += iov[i].iov_len;
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = static_cast<std::size_t>(n);
      const ssize_t w = ::sendmsg(p.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail_peer(p, ErrorKind::Connection,
                  errno == EPIPE || errno == ECONNRESET
                      ? closed_reason(p)
                      : fmt::format("the connection to {} failed: {}", describe_peer_locked(p.rank),
                                    errno_text(errno)));
        return;
      }
      std::size_t left = static_cast<std::size_t>(w);
      while (!p.sends.empty()) {
        auto& r = *p.sends.front();
        const std::size_t h = std::min(left, wire::kHeaderBytes - r.header_sent);
        r.header_sent += h;
        left -= h;
        const std::size_t d = std::min(left, r.bytes - r.moved);
        r.moved += d;
        left -= d;
        if (r.header_sent < wire::kHeaderBytes || r.moved < r.bytes) break;
        auto done = std::move(p.sends.front());
        p.sends.pop_front();
        complete(*done);
      }
      if (static_cast<std::size_t>(w) < asked) return;  // the kernel's buffer is full
    }
  }

  // ---- polling ----

  // Adds the Ready peers' sockets (mu held).
  void add_peer_fds(std::vector<pollfd>& fds, std::vector<int>& who) {
    for (int rank : connected) {
      const auto& p = peers[static_cast<std::size_t>(rank)];
      if (p.state != PeerState::Ready) continue;
      short events = 0;
      if (p.rx != Rx::Paused) events |= POLLIN;
      if (!p.sends.empty()) events |= POLLOUT;
      if (events == 0) continue;
      fds.push_back({p.fd, events, 0});
      who.push_back(p.rank);
    }
  }

  // Moves data for the peers whose sockets are ready (mu held).
  void service(const std::vector<pollfd>& fds, const std::vector<int>& who) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (who[i] < 0 || fds[i].revents == 0) continue;
      auto& p = peers[static_cast<std::size_t>(who[i])];
      if (p.state != PeerState::Ready || p.fd != fds[i].fd) continue;
      if (fds[i].revents & POLLOUT) flush(p);
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) receive(p);
    }
  }

  // One poll of the peers by the waiting thread (drive_mu held).
  void drive_once(int timeout_ms, std::vector<pollfd>& fds, std::vector<int>& who) {
    fds.clear();
    who.clear();
    fds.push_back({driver_wake, POLLIN, 0});
    who.push_back(-1);
    {
      std::lock_guard lock(mu);
      add_peer_fds(fds, who);
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready <= 0) return;
    if (fds[0].revents & POLLIN) drain(driver_wake);
    std::lock_guard lock(mu);
    service(fds, who);
  }

  // ---- accepting (background thread) ----

  void accept_all() {
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof(ss);
      const int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          collie::log().warn("rank {}: accept on {} failed: {}", opt.rank, address,
                             errno_text(errno));
        }
        return;
      }
      tune(fd);
      Handshake h;
      h.fd = fd;
      h.remote = sockaddr_text(ss);
      h.nonce = wire::random_nonce();
      h.deadline = Clock::now() + opt.handshake_timeout;
      std::array<std::uint8_t, wire::kChallengeBytes> challenge{};
      std::memcpy(challenge.data(), wire::kMagic.data(), 4);
      wire::put16(challenge.data() + 4, kProtocolVersion);
      wire::put32(challenge.data() + 8, static_cast<std::uint32_t>(opt.rank));
      std::memcpy(challenge.data() + 12, h.nonce.data(), wire::kNonceBytes);
      if (::send(fd, challenge.data(), challenge.size(), MSG_NOSIGNAL) !=
          static_cast<ssize_t>(challenge.size())) {
        ::close(fd);
        continue;
      }
      handshakes.push_back(h);
    }
  }

  void send_verdict(int fd, wire::Verdict verdict, std::string_view reason) {
    reason = reason.substr(0, wire::kMaxReasonBytes);
    std::vector<std::uint8_t> out(wire::kVerdictBytes + reason.size());
    out[0] = static_cast<std::uint8_t>(verdict);
    wire::put16(out.data() + 2, static_cast<std::uint16_t>(reason.size()));
    std::memcpy(out.data() + wire::kVerdictBytes, reason.data(), reason.size());
    [[maybe_unused]] const auto w = ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  }

  void refuse(Handshake& h, std::string_view reason, bool answer) {
    collie::log().warn("rank {} refused a connection from {}: {}", opt.rank, h.remote, reason);
    if (answer) send_verdict(h.fd, wire::Verdict::Refused, reason);
    ::close(h.fd);
    h.fd = -1;
  }

  // Installs an accepted or connected socket as the peer's connection (mu held).
  void install(Peer& p, int fd) {
    p.fd = fd;
    connected.push_back(p.rank);
    p.state = PeerState::Ready;
    p.staging.assign(kStagingBytes, 0);
    state_cv.notify_all();
    wake_pollers();
  }

  // Reads a Hello; decides. Returns false when the handshake is over.
  bool step(Handshake& h) {
    const ssize_t n = ::recv(h.fd, h.buffer.data() + h.got, h.buffer.size() - h.got, 0);
    if (n == 0) {
      refuse(h, "it closed the connection during the handshake", false);
      return false;
    }
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return true;
      refuse(h, errno_text(errno), false);
      return false;
    }
    h.got += static_cast<std::size_t>(n);
    if (h.got >= 4 && !wire::has_magic(h.buffer.data())) {
      refuse(h, "it is not a collie peer (wrong magic bytes)", false);
      return false;
    }
    if (h.got < h.buffer.size()) return true;
    const auto hello = wire::decode_hello(h.buffer.data());
    const auto world = static_cast<std::uint32_t>(opt.world_size);
    if (hello.version != kProtocolVersion) {
      refuse(h,
             fmt::format("it speaks peer protocol version {}, this rank speaks {}", hello.version,
                         kProtocolVersion),
             true);
      return false;
    }
    if (hello.group_id != opt.group_id || hello.world_size != world) {
      refuse(h,
             fmt::format("it belongs to another job or group (group id {:016x}, world size {}; "
                         "this is group '{}' id {:016x}, world size {})",
                         hello.group_id, hello.world_size, opt.group, opt.group_id, world),
             true);
      return false;
    }
    if (hello.to != static_cast<std::uint32_t>(opt.rank) || hello.from >= world ||
        hello.from == static_cast<std::uint32_t>(opt.rank)) {
      refuse(h,
             fmt::format("it claims to be rank {} looking for rank {}, but this is rank {}",
                         hello.from, hello.to, opt.rank),
             true);
      return false;
    }
    if (!wire::proofs_equal(hello.proof, wire::peer_proof(opt.token, h.nonce, opt.group_id,
                                                          hello.from, hello.to))) {
      refuse(h, "wrong token (COLLIE_STORE_TOKEN differs)", true);
      return false;
    }
    std::lock_guard lock(mu);
    auto& p = peers[hello.from];
    const bool theirs_wins =
        p.state == PeerState::Unconnected ||
        (p.state == PeerState::Connecting && static_cast<int>(hello.from) < opt.rank);
    if (p.state == PeerState::Failed) {
      send_verdict(
          h.fd, wire::Verdict::Refused,
          fmt::format("rank {} already gave up on rank {}: {}", opt.rank, hello.from, p.failure));
      ::close(h.fd);
    } else if (theirs_wins) {
      p.address = h.remote;
      send_verdict(h.fd, wire::Verdict::Accepted, "");
      install(p, h.fd);
      collie::log().debug("rank {}: accepted rank {} from {}", opt.rank, hello.from, h.remote);
    } else {
      send_verdict(h.fd, wire::Verdict::Duplicate, "");
      ::close(h.fd);
    }
    h.fd = -1;
    return false;
  }

  void background_loop() {
    std::vector<pollfd> fds;
    std::vector<int> who;  // peer rank; -1 wake, -2 listen, -3 - i handshake i
    while (!stopping.load()) {
      fds.clear();
      who.clear();
      fds.push_back({background_wake, POLLIN, 0});
      who.push_back(-1);
      fds.push_back({listen_fd, POLLIN, 0});
      who.push_back(-2);
      auto timeout = Clock::now() + 100ms;
      for (std::size_t i = 0; i < handshakes.size(); ++i) {
        fds.push_back({handshakes[i].fd, POLLIN, 0});
        who.push_back(-3 - static_cast<int>(i));
        timeout = std::min(timeout, handshakes[i].deadline);
      }
      const bool with_peers = waiters.load() == 0;
      if (with_peers) {
        std::lock_guard lock(mu);
        add_peer_fds(fds, who);
      }
      const int ready = ::poll(fds.data(), fds.size(), remaining_ms(timeout));
      if (ready < 0 && errno != EINTR) {
        collie::log().error("rank {}: poll failed: {}", opt.rank, errno_text(errno));
        std::this_thread::sleep_for(10ms);
        continue;
      }
      if (fds[0].revents & POLLIN) drain(background_wake);
      if (fds[1].revents & POLLIN) accept_all();
      const auto now = Clock::now();
      bool peer_events = false;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (who[i] <= -3) {
          auto& h = handshakes[static_cast<std::size_t>(-3 - who[i])];
          if (fds[i].revents != 0) {
            step(h);  // closes and clears h.fd when the handshake is over
          } else if (now >= h.deadline) {
            refuse(h,
                   fmt::format("it sent no complete handshake within {}",
                               describe_duration(opt.handshake_timeout)),
                   false);
          }
        } else if (who[i] >= 0 && fds[i].revents != 0) {
          peer_events = true;
        }
      }
      std::erase_if(handshakes, [](const Handshake& h) { return h.fd < 0; });
      if (peer_events && waiters.load() == 0) {
        std::unique_lock drive(drive_mu, std::try_to_lock);
        if (drive.owns_lock()) {
          std::lock_guard lock(mu);
          service(fds, who);
        }
      }
    }
  }

  // ---- connecting (caller's thread, mu not held) ----

  struct Attempt {
    int fd = -1;
    wire::Verdict verdict = wire::Verdict::Refused;
    std::string error;  // empty: the handshake completed with `verdict`
    ErrorKind kind = ErrorKind::Connection;
  };

  Attempt connect_and_handshake(int peer, Clock::time_point deadline) {
    Attempt a;
    std::string where;
    {
      std::lock_guard lock(mu);
      where = peers[static_cast<std::size_t>(peer)].published;
    }
    if (where.empty()) {
      try {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        where = store->get(key(peer), std::max(left, std::chrono::milliseconds(1)));
      } catch (const TimeoutError&) {
        a.kind = ErrorKind::Timeout;
        a.error = fmt::format(
            "rank {} never published its address (store key '{}') within {}: did it start and "
            "join the group?",
            peer, key(peer), describe_duration(opt.timeout));
        return a;
      } catch (const Error& e) {
        a.error =
            fmt::format("could not look up rank {}'s address in the store: {}", peer, e.what());
        return a;
      }
    }
    {
      std::lock_guard lock(mu);
      peers[static_cast<std::size_t>(peer)].published = where;
    }
    const auto split = split_host_port(where);
    if (!split) {
      a.error =
          fmt::format("rank {} published an address that is not host:port: '{}'", peer, where);
      return a;
    }
    const std::string& host = split->host;
    const std::string port = std::to_string(split->port);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &found); rc != 0) {
      a.error =
          fmt::format("cannot resolve rank {}'s address {}: {}", peer, where, gai_strerror(rc));
      return a;
    }
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, freeaddrinfo);
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      a.error = fmt::format("cannot open a socket: {}", errno_text(errno));
      return a;
    }
    tune(fd);
    auto fail_with = [&](std::string text) {
      ::close(fd);
      a.error = fmt::format("cannot connect to rank {} at {}: {}", peer, where, text);
      return a;
    };
    if (::connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) return fail_with(errno_text(errno) + " (has it exited?)");
      pollfd pfd{fd, POLLOUT, 0};
      if (::poll(&pfd, 1, remaining_ms(deadline)) <= 0) {
        a.kind = ErrorKind::Timeout;
        return fail_with("no answer in time");
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return fail_with(errno_text(err) + " (has it exited?)");
    }
    std::array<std::uint8_t, wire::kChallengeBytes> challenge{};
    if (auto e = read_exact(fd, challenge.data(), challenge.size(), deadline); !e.empty())
      return fail_with(e);
    if (!wire::has_magic(challenge.data()))
      return fail_with("the process listening there is not a collie peer");
    if (wire::get16(challenge.data() + 4) != kProtocolVersion)
      return fail_with(fmt::format("it speaks peer protocol version {}, this rank speaks {}",
                                   wire::get16(challenge.data() + 4), kProtocolVersion));
    if (wire::get32(challenge.data() + 8) != static_cast<std::uint32_t>(peer))
      return fail_with(
          fmt::format("the process listening there is rank {}", wire::get32(challenge.data() + 8)));
    wire::Nonce nonce{};
    std::memcpy(nonce.data(), challenge.data() + 12, wire::kNonceBytes);
    wire::Hello hello;
    hello.version = kProtocolVersion;
    hello.group_id = opt.group_id;
    hello.from = static_cast<std::uint32_t>(opt.rank);
    hello.to = static_cast<std::uint32_t>(peer);
    hello.world_size = static_cast<std::uint32_t>(opt.world_size);
    hello.proof = wire::peer_proof(opt.token, nonce, opt.group_id, hello.from, hello.to);
    std::array<std::uint8_t, wire::kHelloBytes> out{};
    wire::encode(hello, out.data());
    if (auto e = write_exact(fd, out.data(), out.size(), deadline); !e.empty()) return fail_with(e);
    std::array<std::uint8_t, wire::kVerdictBytes> verdict{};
    if (auto e = read_exact(fd, verdict.data(), verdict.size(), deadline); !e.empty())
      return fail_with(e);
    std::string reason(wire::get16(verdict.data() + 2), '\0');
    if (!reason.empty()) {
      if (auto e = read_exact(fd, reinterpret_cast<std::uint8_t*>(reason.data()), reason.size(),
                              deadline);
          !e.empty())
        return fail_with(e);
    }
    a.verdict = static_cast<wire::Verdict>(verdict[0]);
    if (a.verdict == wire::Verdict::Refused) {
      a.kind = ErrorKind::Connection;
      return fail_with("it refused this rank: " + reason);
    }
    if (a.verdict != wire::Verdict::Accepted && a.verdict != wire::Verdict::Duplicate)
      return fail_with("unknown handshake verdict");
    a.fd = fd;
    return a;
  }

  // Makes sure the peer is Ready or Failed.
  void ensure_connected(int peer) {
    std::unique_lock lock(mu);
    auto& p = peers[static_cast<std::size_t>(peer)];
    const auto deadline = Clock::now() + opt.timeout;
    while (p.state == PeerState::Connecting) {
      if (!state_cv.wait_until(lock, deadline, [&] { return p.state != PeerState::Connecting; })) {
        fail_peer(p, ErrorKind::Timeout,
                  fmt::format("no connection to {} within {}", describe_peer_locked(peer),
                              describe_duration(opt.timeout)));
      }
    }
    if (p.state != PeerState::Unconnected) return;
    p.state = PeerState::Connecting;
    lock.unlock();
    auto a = connect_and_handshake(peer, deadline);
    lock.lock();
    if (!a.error.empty()) {
      if (p.state == PeerState::Connecting) fail_peer(p, a.kind, a.error);
      return;
    }
    if (a.verdict == wire::Verdict::Accepted && p.state == PeerState::Connecting) {
      install(p, a.fd);
      collie::log().debug("rank {}: connected to {}", opt.rank, describe_peer_locked(peer));
      return;
    }
    ::close(a.fd);  // the peer's own connection to us is the one kept
    if (!state_cv.wait_until(lock, deadline, [&] { return p.state != PeerState::Connecting; })) {
      fail_peer(p, ErrorKind::Timeout,
                fmt::format("{} said it was connecting to this rank, but no connection came "
                            "within {}",
                            describe_peer_locked(peer), describe_duration(opt.timeout)));
    }
  }
};

// ---------------------------------------------------------------------------

Mesh::Mesh(std::shared_ptr<store::Store> store, MeshOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>(options_)) {
  auto& m = *impl_;
  if (options_.world_size < 1 || options_.rank < 0 || options_.rank >= options_.world_size) {
    throw Error(fmt::format("mesh: rank {} is outside a world of size {}", options_.rank,
                            options_.world_size));
  }
  m.store = std::move(store);
  m.peers.resize(static_cast<std::size_t>(options_.world_size));
  for (int r = 0; r < options_.world_size; ++r)
    m.peers[static_cast<std::size_t>(r)].rank = r;
  m.peers[static_cast<std::size_t>(options_.rank)].state = PeerState::Ready;  // itself, no socket

  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(options_.listen_address.c_str(), "0", &hints, &found); rc != 0) {
    throw Error(fmt::format("rank {} cannot listen on '{}': {}", options_.rank,
                            options_.listen_address, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(found, freeaddrinfo);
  m.listen_fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (m.listen_fd < 0 || ::bind(m.listen_fd, found->ai_addr, found->ai_addrlen) != 0 ||
      ::listen(m.listen_fd, SOMAXCONN) != 0) {
    const int e = errno;
    if (m.listen_fd >= 0) ::close(m.listen_fd);
    throw Error(fmt::format("rank {} cannot listen on {}: {}", options_.rank,
                            options_.listen_address, errno_text(e)));
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(m.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  m.address = sockaddr_text(ss);
  m.background_wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  m.driver_wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  m.peers[static_cast<std::size_t>(options_.rank)].published = m.address;
  m.background = std::thread([&m] { m.background_loop(); });
  try {
    m.store->set(m.key(options_.rank), m.address);
  } catch (...) {
    m.stopping = true;
    kick(m.background_wake);
    m.background.join();
    ::close(m.listen_fd);
    ::close(m.background_wake);
    ::close(m.driver_wake);
    throw;
  }
  collie::log().debug("rank {} listens on {}", options_.rank, m.address);
}

Mesh::~Mesh() {
  auto& m = *impl_;
  m.stopping = true;
  kick(m.background_wake);
  m.background.join();
  std::lock_guard drive(m.drive_mu);
  std::lock_guard lock(m.mu);
  for (auto& p : m.peers) {
    const std::string reason = "the mesh was shut down on this rank";
    for (auto& r : p.sends)
      m.fail_for_peer(*r, ErrorKind::Connection, reason);
    for (auto& [tag, q] : p.posted)
      for (auto& r : q)
        m.fail_for_peer(*r, ErrorKind::Connection, reason);
    if (p.current_recv) m.fail_for_peer(*p.current_recv, ErrorKind::Connection, reason);
    if (p.fd >= 0) ::shutdown(p.fd, SHUT_WR);
  }
  // A lingering close: closing a socket with unread data in it sends a reset,
  // and a reset makes the peer's kernel drop what it had not yet read of
  // ours (the last message before an error, say). So read and discard until
  // each peer closes its side too (it does as soon as it sees ours), for at
  // most a quarter of a second, then close.
  std::vector<pollfd> open;
  for (auto& p : m.peers)
    if (p.fd >= 0) open.push_back({p.fd, POLLIN, 0});
  const auto linger_until = Clock::now() + 250ms;
  while (!open.empty() && Clock::now() < linger_until) {
    if (::poll(open.data(), open.size(), std::max(remaining_ms(linger_until), 1)) < 0 &&
        errno != EINTR)
      break;
    std::erase_if(open, [](const pollfd& f) {
      if (f.revents == 0) return false;
      std::array<std::byte, 64 * 1024> sink;
      const auto n = ::read(f.fd, sink.data(), sink.size());
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    });
  }
  for (auto& p : m.peers)
    if (p.fd >= 0) ::close(p.fd);
  for (auto& h : m.handshakes)
    if (h.fd >= 0) ::close(h.fd);
  ::close(m.listen_fd);
  ::close(m.background_wake);
  ::close(m.driver_wake);
}

RequestPtr Mesh::isend(int peer, std::uint64_t tag, const void* data, std::size_t bytes,
                       std::uint64_t fingerprint) {
  auto& m = *impl_;
  if (peer < 0 || peer >= options_.world_size) {
    throw Error(fmt::format("rank {}: send to rank {}: the group has ranks 0 to {}", options_.rank,
                            peer, options_.world_size - 1));
  }
  auto r = std::make_shared<Request>();
  r->is_send = true;
  r->peer = peer;
  r->tag = tag;
  r->data = const_cast<std::byte*>(static_cast<const std::byte*>(data));
  r->bytes = bytes;
  r->fingerprint = fingerprint;
  if (peer == options_.rank) {
    std::lock_guard lock(m.mu);
    ++m.pending;
    auto& self = m.peers[static_cast<std::size_t>(peer)];
    if (auto recv = take_first(self.posted, tag)) {
      if (recv->bytes != bytes) {
        m.fail_size_mismatch(*recv, bytes, fingerprint);
      } else {
        if (bytes > 0) std::memcpy(recv->data, data, bytes);
        recv->moved = bytes;
        recv->fingerprint = fingerprint;
        m.complete(*recv);
      }
    } else {
      // Buffered: a send to oneself completes at once, whatever the queue holds.
      auto u = std::make_shared<Unexpected>();
      u->fingerprint = fingerprint;
      u->length = bytes;
      u->data = m.take_payload(bytes);
      if (bytes > 0) std::memcpy(u->data.get(), data, bytes);
      u->got = bytes;
      u->complete = true;
      m.unexpected_bytes += bytes;
      self.unexpected[tag].push_back(std::move(u));
    }
    r->moved = bytes;
    m.complete(*r);
    return r;
  }
  std::unique_lock lock(m.mu);
  auto& p = m.peers[static_cast<std::size_t>(peer)];
  if (p.state == PeerState::Unconnected || p.state == PeerState::Connecting) {
    lock.unlock();  // connecting blocks; only the first message to a peer pays it
    m.ensure_connected(peer);
    lock.lock();
  }
  ++m.pending;
  if (p.state != PeerState::Ready) {
    m.fail_for_peer(*r, p.failure_kind, p.failure);
    return r;
  }
  p.sends.push_back(r);
  if (p.sends.size() == 1) m.flush(p);
  if (r->state.load(std::memory_order_relaxed) == static_cast<int>(State::Pending))
    m.wake_pollers();
  return r;
}

RequestPtr Mesh::irecv(int peer, std::uint64_t tag, void* data, std::size_t bytes) {
  auto& m = *impl_;
  if (peer < 0 || peer >= options_.world_size) {
    throw Error(fmt::format("rank {}: recv from rank {}: the group has ranks 0 to {}",
                            options_.rank, peer, options_.world_size - 1));
  }
  auto r = std::make_shared<Request>();
  r->peer = peer;
  r->tag = tag;
  r->data = static_cast<std::byte*>(data);
  r->bytes = bytes;
  bool connect = false;
  {
    std::lock_guard lock(m.mu);
    ++m.pending;
    auto& p = m.peers[static_cast<std::size_t>(peer)];
    if (auto u = take_first(p.unexpected, tag)) {
      m.unexpected_bytes -= u->length;
      const bool in_flight = !u->complete;
      if (u->length != bytes) {
        m.fail_size_mismatch(*r, u->length, u->fingerprint);
        if (in_flight) p.current_unexpected.reset();  // the rest is read and dropped
      } else {
        if (u->got > 0) std::memcpy(data, u->data.get(), u->got);
        r->moved = u->got;
        r->fingerprint = u->fingerprint;
        if (in_flight) {  // the rest goes straight into the caller's memory
          p.current_unexpected.reset();
          p.current_recv = r;
        } else {
          m.complete(*r);
          m.give_payload(std::move(u->data), u->length);
        }
      }
      m.resume_paused();
      return r;
    }
    if (p.state == PeerState::Failed) {
      m.fail_for_peer(*r, p.failure_kind, p.failure);
      return r;
    }
    p.posted[tag].push_back(r);
    if (p.rx == Rx::Paused && p.current.tag == tag) m.resume_paused();
    connect = p.state == PeerState::Unconnected;
  }
  // Connecting now, not at the first send, means a peer that dies before
  // sending is noticed at once.
  if (connect) m.ensure_connected(peer);
  return r;
}

bool Mesh::drive_until(const RequestPtr& request, Clock::time_point deadline) {
  auto& m = *impl_;
  auto& r = *request;
  auto pending = [&] {
    return r.state.load(std::memory_order_acquire) == static_cast<int>(State::Pending);
  };
  if (pending()) {
    ++m.waiters;
    struct Leave {
      Impl& m;
      ~Leave() {
        // The background thread moves data while nobody waits.
        if (--m.waiters == 0 && m.pending.load() > 0) kick(m.background_wake);
      }
    } leave{m};
    const auto spin_until = Clock::now() + options_.spin;
    std::vector<pollfd> fds;
    std::vector<int> who;
    while (pending()) {
      auto now = Clock::now();
      if (now >= deadline) break;
      std::unique_lock drive(m.drive_mu, std::try_to_lock);
      if (drive.owns_lock()) {
        while (pending() && (now = Clock::now()) < deadline) {
          int ms = 0;
          if (now >= spin_until) ms = std::clamp(remaining_ms(deadline), 1, 50);
          m.drive_once(ms, fds, who);
          // Spinning, let a thread waiting for this CPU run: on a busy host
          // it may be the one that sends what this wait is for.
          if (ms == 0 && pending()) sched_yield();
        }
      } else {
        std::unique_lock lock(m.done_mu);
        m.done_cv.wait_for(lock, 1ms);
      }
    }
  }
  return !pending();
}

bool Mesh::wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) {
  if (!drive_until(request, Clock::now() + timeout)) return false;
  wait(request, std::chrono::milliseconds(0));  // done: throws its error, if any
  return true;
}

std::vector<std::pair<int, std::uint64_t>> Mesh::queued_fingerprints(std::uint64_t tag) const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::pair<int, std::uint64_t>> out;
  for (const auto& p : impl_->peers) {
    auto it = p.unexpected.find(tag);
    if (it == p.unexpected.end()) continue;
    for (const auto& u : it->second) out.emplace_back(p.rank, u->fingerprint);
  }
  return out;
}

void Mesh::wait(const RequestPtr& request, std::optional<std::chrono::milliseconds> timeout) {
  auto& m = *impl_;
  auto& r = *request;
  const auto limit = timeout.value_or(options_.timeout);
  const auto deadline = Clock::now() + limit;
  auto pending = [&] {
    return r.state.load(std::memory_order_acquire) == static_cast<int>(State::Pending);
  };
  if (pending()) {
    drive_until(request, deadline);
    if (pending()) {
      std::lock_guard lock(m.mu);
      if (pending()) {
        auto& p = m.peers[static_cast<std::size_t>(r.peer)];
        std::string why = fmt::format("{} timed out after {} ({})", m.describe_request(r),
                                      describe_duration(limit), m.progress_text(r));
        if (p.state == PeerState::Connecting) why += "; the connection is still being set up";
        if (!r.is_send && p.rx == Rx::Paused)
          why += fmt::format(
              "; reads from {} are paused: the unexpected-message queue is full ({} held, "
              "limit {})",
              m.describe_peer_locked(r.peer), plural_bytes(m.unexpected_bytes),
              plural_bytes(options_.max_unexpected_bytes));
        bool untouched = false;
        if (r.is_send) {
          untouched = !r.header_built;
          if (untouched) std::erase(p.sends, request);
        } else if (p.current_recv != request) {
          auto it = p.posted.find(r.tag);
          if (it != p.posted.end()) std::erase(it->second, request);
          untouched = true;
        }
        m.fail(r, ErrorKind::Timeout, why);
        if (!untouched) {
          m.fail_peer(p, ErrorKind::Connection,
                      fmt::format("the connection to {} was closed after a {} timed out "
                                  "half-way through a message",
                                  m.describe_peer_locked(r.peer), r.is_send ? "send" : "recv"));
        }
      }
    }
  }
  if (r.state.load(std::memory_order_acquire) == static_cast<int>(State::Failed)) {
    switch (r.error_kind) {
      case ErrorKind::Timeout:
        throw TimeoutError(r.error);
      case ErrorKind::Protocol:
        throw ProtocolError(r.error);
      case ErrorKind::Request:
        throw RequestError(r.error);
      default:
        throw ConnectionError(r.error);
    }
  }
}

bool Mesh::test(const RequestPtr& request) const {
  return request->state.load(std::memory_order_acquire) != static_cast<int>(State::Pending);
}

std::uint64_t Mesh::fingerprint(const RequestPtr& request) const {
  // Written under the lock before the request finished: once it has, the
  // acquire in test() is enough (the common case, after a wait).
  if (test(request)) return request->fingerprint;
  std::lock_guard lock(impl_->mu);
  return request->fingerprint;
}

std::size_t Mesh::transferred(const RequestPtr& request) const {
  std::lock_guard lock(impl_->mu);
  return request->moved;
}

std::string Mesh::describe_peer(int peer) const {
  std::lock_guard lock(impl_->mu);
  if (peer < 0 || peer >= options_.world_size) return fmt::format("rank {}", peer);
  return impl_->describe_peer_locked(peer);
}

std::string Mesh::address() const {
  return impl_->address;
}

void Mesh::prefetch_addresses() {
  auto& m = *impl_;
  std::vector<std::string> keys;
  for (int r = 0; r < options_.world_size; ++r)
    keys.push_back(m.key(r));
  const auto values = m.store->multi_get(keys);
  std::lock_guard lock(m.mu);
  for (std::size_t r = 0; r < values.size(); ++r)
    m.peers[r].published = values[r];
}

int Mesh::connection_count() const {
  std::lock_guard lock(impl_->mu);
  return static_cast<int>(
      std::count_if(impl_->peers.begin(), impl_->peers.end(),
                    [](const Peer& p) { return p.fd >= 0 && p.state == PeerState::Ready; }));
}

std::uint64_t Mesh::random_group_id() {
  return crypto::random_u64();
}

}  // namespace collie::transport
