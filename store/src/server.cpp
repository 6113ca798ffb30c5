#include <atomic>
#include <deque>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <cmath>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sys/resource.h>
#include <thread>
#include <unistd.h>
#include <unordered_map>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/crypto.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/store/server.hpp>

#include "auth.hpp"
#include "frame_queue.hpp"
#include "key_value_state.hpp"
#include "peer_user.hpp"
#include "protocol.hpp"
#include "torch_dialect.hpp"

namespace collie::store {

using asio::ip::tcp;

namespace {

// The kernel's cap on a listen backlog; asking for it gets the most the
// system allows, so a burst of thousands of connects is not dropped.
int system_max_backlog() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (in >> value && value > 0) return value;
  return asio::socket_base::max_listen_connections;
}

class Session;
using Clock = std::chrono::steady_clock;

std::string seconds_text(Clock::duration d) {
  return describe_duration(std::chrono::duration_cast<std::chrono::milliseconds>(d));
}

// Warnings about one address, at most one line per interval (RateLimitedLog);
// a timer logs the counts of the lines left out when their interval ends.
class AddressLog {
 public:
  AddressLog(asio::io_context& io, std::chrono::milliseconds interval)
      : timer_(io), lines_(interval) {}

  void log(spdlog::level::level_enum level, const std::string& address, std::string message) {
    lines_.log(level, address, std::move(message));
    schedule(lines_.flush());
  }

  void cancel() { timer_.cancel(); }

 private:
  void schedule(std::optional<Clock::time_point> due) {
    if (!due || (armed_ && *due >= armed_at_)) return;
    armed_ = true;
    armed_at_ = *due;
    timer_.expires_at(*due);
    timer_.async_wait([this](std::error_code ec) {
      if (ec) return;  // cancelled: re-armed sooner, or stopping
      armed_ = false;
      schedule(lines_.flush());
    });
  }

  asio::steady_timer timer_;
  RateLimitedLog lines_;
  bool armed_ = false;
  Clock::time_point armed_at_{};
};

// Failed authentication slows its address down: after f recent failures
// (halved every minute without one), each attempt from that address waits
// for its turn, 50 ms x 2^(f-1) apart, at most 2 s apart. An attempt whose
// turn would be more than a few seconds away is refused without a check.
class AuthThrottle {
 public:
  static constexpr auto kMaxWait = std::chrono::seconds(5);

  // When the proof of a client from `address` may be checked; nullopt if
  // its turn is more than kMaxWait away.
  std::optional<Clock::time_point> turn(const std::string& address, Clock::time_point now) {
    auto it = entries_.find(address);
    if (it == entries_.end()) return now;
    Entry& e = it->second;
    const double f = failures(e, now);
    if (f < 0.5 && e.next_turn <= now) {
      entries_.erase(it);
      return now;
    }
    const auto at = std::max(now, e.next_turn);
    if (at - now > kMaxWait) return std::nullopt;
    e.next_turn = at + gap(f);
    return at;
  }

  void failed(const std::string& address, Clock::time_point now) {
    if (!entries_.contains(address) && entries_.size() >= kMaxAddresses) forget_quiet(now);
    Entry& e = entries_[address];
    e.failures = failures(e, now) + 1;
    e.last = now;
    e.next_turn = std::max(e.next_turn, now + gap(e.failures));
  }

 private:
  struct Entry {
    double failures = 0;
    Clock::time_point last{};
    Clock::time_point next_turn{};
  };
  static constexpr std::size_t kMaxAddresses = 4096;

  static Clock::duration gap(double failures) {
    if (failures < 0.5) return Clock::duration::zero();
    const double ms = 50.0 * std::pow(2.0, std::max(0.0, failures - 1.0));
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(std::min(ms, 2000.0)));
  }
  static double failures(const Entry& e, Clock::time_point now) {
    const double minutes = std::chrono::duration<double>(now - e.last).count() / 60.0;
    return e.failures * std::pow(0.5, minutes);
  }
  void forget_quiet(Clock::time_point now) {
    std::erase_if(entries_, [&](const auto& kv) { return failures(kv.second, now) < 1; });
    // Still full (failures from very many addresses): the oldest go.
    while (entries_.size() >= kMaxAddresses) {
      auto oldest = entries_.begin();
      for (auto it = entries_.begin(); it != entries_.end(); ++it)
        if (it->second.last < oldest->second.last) oldest = it;
      entries_.erase(oldest);
    }
  }

  std::unordered_map<std::string, Entry> entries_;
};

// The server without its public face: listeners, connections, data.
// Everything below runs on the one I/O thread.
class ServerCore {
 public:
  explicit ServerCore(ServerOptions options);
  ~ServerCore();

  std::uint16_t port() const { return port_; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  std::size_t connections() const { return connections_.load(); }
  StoreServer::Stats stats();
  void stop();

  const ServerOptions& options() const { return options_; }
  KeyValueState& state() { return state_; }
  MemoryBudget& budget() { return budget_; }
  AddressLog& address_log() { return address_log_; }
  AuthThrottle& throttle() { return throttle_; }
  void count_auth_failure() { ++auth_failures_; }
  // Gives memory the clients no longer hold back to the system once enough
  // was freed: the allocator keeps freed small blocks (a hostile client's
  // parked waits) otherwise, and the process would stay as large as its peak.
  void maybe_trim() {
#if defined(__GLIBC__)
    const std::size_t used = budget_.used();
    high_water_ = std::max(high_water_, used);
    if (high_water_ > used + (std::size_t{16} << 20)) {
      malloc_trim(0);
      high_water_ = used;
    }
#endif
  }
  void remove(const std::shared_ptr<Session>& session);

 private:
  std::error_code try_listen(tcp::endpoint endpoint, bool v6_only);
  void accept(tcp::acceptor& acceptor);
  void admit(tcp::socket socket);
  bool make_way(std::deque<std::weak_ptr<Session>>& queue);
  void run();
  void shutdown();

  ServerOptions options_;
  asio::io_context io_{1};
  // Before everything that holds values or buffers: they give back to it.
  MemoryBudget budget_;
  AddressLog address_log_;
  AuthThrottle throttle_;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::vector<std::unique_ptr<asio::steady_timer>> accept_retry_;
  std::set<std::shared_ptr<Session>> sessions_;
  std::unordered_map<std::string, std::size_t> per_address_;
  // Per address, the connections still in their handshake, oldest first.
  std::unordered_map<std::string, std::deque<std::weak_ptr<Session>>> handshaking_;
  std::deque<std::weak_ptr<Session>> handshaking_all_;  // every address
  std::size_t evicted_ = 0;
  std::size_t served_ = 0;    // sessions past the limits
  std::size_t refusing_ = 0;  // sessions being told they are over a limit
  std::size_t refused_ = 0;
  std::size_t auth_failures_ = 0;
  std::size_t high_water_ = 0;  // of the budget, since the last trim
  KeyValueState state_;
  std::uint16_t port_ = 0;
  std::vector<std::string> addresses_;
  std::atomic<std::size_t> connections_{0};
  std::thread thread_;
  std::once_flag stopped_;
};

// Sessions over a connection limit that are told so (after the client's
// hello) at once; past this many, more are closed without a word.
constexpr std::size_t kMaxRefusing = 64;
// A connection still in its handshake after this long may be closed to make
// way for a newcomer at a connection limit (make_way()).
constexpr auto kStuckInHandshake = std::chrono::seconds(1);
// A frame up to this size is read without asking the memory budget (a
// connection holds at most about twice this much unaccounted).
constexpr std::size_t kFreeFrameBytes = 4096;
// A connection whose own replies (owned bytes) pile up past this stops
// taking requests until its client reads.
constexpr std::size_t kOwnedBacklog = 256 * 1024;

// One client connection: handshake, then a stream of requests and replies.
class Session final : public ReplyTarget, public std::enable_shared_from_this<Session> {
 public:
  Session(ServerCore& server, tcp::socket socket, std::string address,
          std::optional<wire::HelloStatus> refusal)
      : server_(server),
        socket_(std::move(socket)),
        handshake_timer_(socket_.get_executor()),
        timer_(socket_.get_executor()),
        address_(std::move(address)),
        refusal_(refusal),
        in_(server.options().limits.max_message_bytes, kFreeFrameBytes) {
    std::error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : endpoint_text(remote);
  }

  const std::string& address() const { return address_; }
  bool refusing() const { return refusal_.has_value(); }
  bool in_handshake() const { return phase_ == Phase::Hello || phase_ == Phase::Proof; }
  Clock::time_point accepted_at() const { return accepted_at_; }

  void start() {
    handshake_timer_.expires_after(server_.options().handshake_timeout);
    handshake_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->phase_ == Phase::Ready || self->phase_ == Phase::Closed) return;
      // torch 1.x opens a second connection per client and leaves it
      // silent unless it watches a key (which this store refuses): not
      // worth a warning where torch's clients are served.
      if (!self->first_byte_ && self->server_.options().torch_clients) {
        return self->close(spdlog::level::debug,
                           "it sent nothing (torch's idle callback connection, likely)");
      }
      self->close(spdlog::level::warn,
                  fmt::format("no complete handshake within {} ms",
                              self->server_.options().handshake_timeout.count()));
    });
    // One byte first: collie's hello, or (with torch_clients) a torch query.
    asio::async_read(socket_, asio::buffer(hello_in_.data(), 1),
                     [self = shared_from_this()](std::error_code ec, std::size_t) {
                       if (ec) return self->lost(ec);
                       self->on_first_byte();
                     });
  }

  void deliver(std::vector<std::uint8_t> frame) override {
    if (phase_ == Phase::Closed) return;
    if (phase_ == Phase::Torch) return torch_reply(frame);
    server_.budget().take(frame.size());
    out_.push(std::move(frame));
    write();
  }

  void deliver_pieces(std::vector<Piece> pieces) override {
    if (phase_ == Phase::Closed) return;
    if (phase_ == Phase::Torch) return ReplyTarget::deliver_pieces(std::move(pieces));
    for (auto& piece : pieces) {
      server_.budget().take(piece.owned_size());
      out_.push(std::move(piece));
    }
    write();
  }

  void close(spdlog::level::level_enum level, std::string_view reason) {
    if (phase_ == Phase::Closed) return;
    const bool was_ready = phase_ == Phase::Ready || phase_ == Phase::Torch;
    phase_ = Phase::Closed;
    if (level >= spdlog::level::info) {
      server_.address_log().log(
          level, address_, fmt::format("store: closed the connection from {}: {}", peer_, reason));
    } else {
      log().log(level, "store: closed the connection from {}: {}", peer_, reason);
    }
    if (was_ready) server_.state().forget(*this);
    std::error_code ignored;
    handshake_timer_.cancel();
    timer_.cancel();
    socket_.close(ignored);
    server_.budget().give(out_.clear());
    in_.drop();
    in_.release();
    account_input();
    server_.budget().give(torch_counted_);
    torch_counted_ = 0;
    torch_in_ = {};
    server_.maybe_trim();
    server_.remove(shared_from_this());  // may be the last reference: nothing after this
  }

 private:
  enum class Phase { Hello, Proof, Ready, Torch, Closed };

  void lost(std::error_code ec) {
    if (phase_ == Phase::Closed) return;
    if (phase_ == Phase::Proof) {
      return close(spdlog::level::warn,
                   fmt::format("refused: it closed the connection during authentication ({}); "
                               "it may have rejected this server's token",
                               ec.message()));
    }
    close(phase_ == Phase::Ready ? spdlog::level::debug : spdlog::level::info,
          ec == asio::error::eof ? std::string("the client disconnected") : ec.message());
  }

  void on_first_byte() {
    first_byte_ = true;
    if (hello_in_[0] != static_cast<std::uint8_t>(wire::kMagic >> 24)) {
      if (server_.options().torch_clients) return start_torch();
      return close(spdlog::level::warn,
                   fmt::format("refused: not a collie store client (its first byte is 0x{:02x}, "
                               "not 0x{:02x} as collie's magic){}",
                               hello_in_[0], wire::kMagic >> 24,
                               hello_in_[0] <= 13
                                   ? "; a torch TCPStore client? " +
                                         server_.options().torch_refusal_hint
                                   : std::string()));
    }
    asio::async_read(socket_, asio::buffer(hello_in_.data() + 1, hello_in_.size() - 1),
                     [self = shared_from_this()](std::error_code ec, std::size_t) {
                       if (ec) return self->lost(ec);
                       self->on_client_hello();
                     });
  }

  void on_client_hello() {
    const auto hello = wire::decode_client_hello(hello_in_);
    if (hello.magic != wire::kMagic) {
      return close(spdlog::level::warn,
                   fmt::format("refused: not a collie store client (it sent 0x{:08x}, not the "
                               "magic 0x{:08x})",
                               hello.magic, wire::kMagic));
    }
    wire::ServerHello reply;
    reply.limits = server_.options().limits;
    reply.idle_timeout_ms = static_cast<std::uint32_t>(
        std::min<std::int64_t>(server_.options().idle_timeout.count(), UINT32_MAX));
    if (refusal_) {
      reply.status = *refusal_;
      close_after_write_ = true;
      close_reason_ = *refusal_ == wire::HelloStatus::TooManyConnections
                          ? fmt::format("refused: the server has {} connections, its limit",
                                        server_.options().max_connections)
                          : fmt::format(
                                "refused: {} connections from {} already, the limit per "
                                "address",
                                server_.options().max_connections_per_address, address_);
      send_raw(wire::encode(reply));
      return;
    }
    if (hello.version != wire::kVersion) {
      reply.status = wire::HelloStatus::UnsupportedVersion;
      close_after_write_ = true;
      close_reason_ = fmt::format("refused: protocol version {} (this server speaks {})",
                                  hello.version, wire::kVersion);
      send_raw(wire::encode(reply));
      return;
    }
    client_nonce_ = hello.nonce;
    client_has_token_ = hello.has_token;
    const std::string& token = server_.options().token;
    reply.auth_required = !token.empty();
    reply.nonce = auth::random_nonce();
    server_nonce_ = reply.nonce;
    if (reply.auth_required) reply.proof = auth::server_proof(token, client_nonce_, reply.nonce);
    send_raw(wire::encode(reply));
    if (!reply.auth_required) return become_ready();
    phase_ = Phase::Proof;
    asio::async_read(socket_, asio::buffer(proof_in_),
                     [self = shared_from_this()](std::error_code ec, std::size_t) {
                       if (ec) return self->lost(ec);
                       self->on_client_proof();
                     });
  }

  // The proof is checked at this address's turn (at once unless it failed
  // recently), so guessing from one address goes no faster than the turns.
  void on_client_proof() {
    const auto now = Clock::now();
    const auto turn = server_.throttle().turn(address_, now);
    if (!turn) {
      server_.count_auth_failure();
      close_after_write_ = true;
      close_reason_ = fmt::format(
          "refused unchecked: too many failed authentications from {} in the last minutes",
          address_);
      send_raw(std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::Throttled)});
      return;
    }
    if (*turn <= now) return check_proof();
    timer_.expires_at(*turn);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec && self->phase_ == Phase::Proof) self->check_proof();
    });
  }

  void check_proof() {
    const auto expected = auth::client_proof(server_.options().token, client_nonce_, server_nonce_);
    if (!client_has_token_ || !crypto::digests_equal(proof_in_, expected)) {
      server_.count_auth_failure();
      server_.throttle().failed(address_, Clock::now());
      close_after_write_ = true;
      close_reason_ = fmt::format("refused: authentication failed ({})",
                                  client_has_token_ ? "wrong token" : "the client has no token");
      send_raw(std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::Failed)});
      return;
    }
    send_raw(std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::Ok)});
    become_ready();
  }

  template <std::size_t N>
  void send_raw(const std::array<std::uint8_t, N>& bytes) {
    deliver(std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
  }

  void become_ready() {
    phase_ = Phase::Ready;
    handshake_timer_.cancel();
    std::error_code ignored;
    socket_.non_blocking(true, ignored);
    log().debug("store: {} connected", peer_);
    last_activity_ = Clock::now();
    arm_idle_timer(server_.options().idle_timeout);
    read();
  }


  // --- torch's TCPStore clients (torch_dialect.hpp) ---------------------------
  //
  // Each query becomes the collie request that does the same on the same
  // keys; its reply comes back through deliver() and is rewritten in
  // torch's form. torch's protocol has no error replies: a query the store
  // refuses (a limit, the memory budget, a counter that is not a number)
  // closes the connection, and the log says why.

  void start_torch() {
    if (refusal_) {
      return close(spdlog::level::info,
                   "refused a torch TCPStore client: the server is at a connection limit");
    }
    // torch cannot prove the token: on loopback, its client must at least
    // run as this server's user (who can read a rank's token anyway).
    if (server_.options().torch_same_user) {
      std::error_code a, b;
      const auto local = socket_.local_endpoint(a);
      const auto remote = socket_.remote_endpoint(b);
      if (!a && !b && remote.address().is_loopback()) {
        const auto uid = peer_user(local, remote);
        if (!uid || *uid != ::geteuid()) {
          return close(spdlog::level::warn,
                       uid ? fmt::format("refused a torch TCPStore client: it runs as uid {}, "
                                         "not as this store's user (uid {})",
                                         *uid, ::geteuid())
                           : std::string("refused a torch TCPStore client: its user could not be "
                                         "told from /proc/net/tcp"));
        }
      }
    }
    phase_ = Phase::Torch;
    last_activity_ = Clock::now();
    torch_in_.push_back(hello_in_[0]);
    torch_account();
    std::error_code ignored;
    socket_.non_blocking(true, ignored);
    torch_process();
  }

  void torch_read() {
    if (reading_ || phase_ != Phase::Torch) return;
    reading_ = true;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](std::error_code ec) {
      self->reading_ = false;
      if (self->phase_ != Phase::Torch) return;
      if (ec) return self->lost(ec);
      self->torch_receive();
    });
  }

  void torch_receive() {
    std::array<std::uint8_t, 65536> chunk;
    std::error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(chunk), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) return torch_read();
    if (ec) return lost(ec);
    // A query being received holds memory: past a small free amount, only
    // what the store's memory budget has room for (as collie's frames).
    const std::size_t after = torch_in_.size() + n;
    if (after > torch_in_.capacity()) {
      const auto fits = [&](std::size_t capacity) {
        return capacity <= kFreeFrameBytes || capacity <= torch_counted_ ||
               server_.budget().fits(capacity - torch_counted_);
      };
      std::size_t want = std::max(after, torch_in_.capacity() * 3 / 2);
      if (!fits(want)) want = after;
      if (!fits(want)) {
        return close(spdlog::level::warn,
                     fmt::format("refused a torch TCPStore query of {} bytes so far: the store "
                                 "is full (it holds {} of its {} bytes of memory)",
                                 after, server_.budget().used(), server_.budget().limit()));
      }
      torch_in_.reserve(want);
    }
    torch_in_.insert(torch_in_.end(), chunk.begin(),
                     chunk.begin() + static_cast<std::ptrdiff_t>(n));
    last_activity_ = Clock::now();
    torch_account();
    torch_process();
  }

  // Keeps the memory budget up to date with what the torch buffer holds.
  void torch_account() {
    const std::size_t hold = torch_in_.capacity();
    if (hold > torch_counted_) {
      server_.budget().take(hold - torch_counted_);
    } else {
      server_.budget().give(torch_counted_ - hold);
    }
    torch_counted_ = hold;
  }

  void torch_process() {
    const auto& limits = server_.options().limits;
    // The queries are parsed where they lie; the bytes they took leave the
    // buffer at once, after the pass (not one move of the rest per query).
    std::size_t used = 0;
    const auto drop_used = [&] {
      if (phase_ == Phase::Torch && used > 0)
        torch_in_.erase(torch_in_.begin(), torch_in_.begin() + static_cast<std::ptrdiff_t>(used));
      used = 0;
    };
    while (phase_ == Phase::Torch && !close_after_write_) {
      // Replies pile up: its client sends without reading. Wait for it.
      if (out_.bytes() > std::max<std::size_t>(limits.max_message_bytes, 1 << 20))
        return drop_used();
      if (!dialect_) {
        switch (torch::classify(torch_in_)) {
          case torch::Opening::NeedMore:
            return torch_read();
          case torch::Opening::TorchV1:
            dialect_ = torch::Dialect::V1;
            break;
          case torch::Opening::TorchV2:
            dialect_ = torch::Dialect::V2;
            break;
          default:
            return close(spdlog::level::warn,
                         fmt::format("refused: neither a collie store client nor a torch "
                                     "TCPStore client (its first byte is 0x{:02x})",
                                     torch_in_[0]));
        }
        handshake_timer_.cancel();
        log().debug("store: {} is a torch TCPStore client (torch {})", peer_,
                    *dialect_ == torch::Dialect::V1 ? "1.x" : "2.x");
      }
      if (used == torch_in_.size()) {
        torch_in_ = {};
        used = 0;
        torch_account();
        return torch_read();
      }
      torch::Query query;
      const auto parsed = torch::parse(
          *dialect_, std::span<const std::uint8_t>(torch_in_).subspan(used), limits, query);
      if (parsed.result == torch::Parse::NeedMore) {
        drop_used();
        // Part of a query, which must keep coming (as collie's requests).
        if (!stall_armed_) {
          stall_armed_ = true;
          torch_watch_stall(server_.options().handshake_timeout);
        }
        return torch_read();
      }
      if (parsed.result != torch::Parse::Done)
        return close(spdlog::level::warn, "refused a torch TCPStore query: " + parsed.error);
      used += parsed.used;
      torch_handle(query);
    }
    drop_used();
  }

  void torch_handle(const torch::Query& q) {
    if (q.command == torch::Command::Validate) {
      if (q.word != torch::kValidateMagic)
        close(spdlog::level::warn, "refused: a torch VALIDATE with the wrong magic");
      return;
    }
    if (q.command == torch::Command::Ping) {
      std::vector<std::uint8_t> reply;
      torch::put_u32(reply, q.word);
      return torch_send(std::move(reply));
    }
    if (q.command == torch::Command::WatchKey) {
      return close(spdlog::level::warn,
                   "refused torch's WATCH_KEY: collie's store does not call back on key "
                   "changes");
    }
    if (q.command == torch::Command::CancelWait) {
      server_.state().forget(*this);
      for (auto it = torch_pending_.begin(); it != torch_pending_.end();) {
        it = it->second.command == torch::Command::Wait ? torch_pending_.erase(it)
                                                        : std::next(it);
      }
      return torch_send({torch::kWaitCanceled});
    }
    wire::Request r;
    r.id = ++torch_next_id_;
    for (const auto& k : q.keys)
      r.keys.emplace_back(k);
    for (const auto& v : q.values)
      r.values.emplace_back(v);
    switch (q.command) {
      case torch::Command::Set:
        r.op = wire::Op::Set;
        break;
      case torch::Command::Append:
        r.op = wire::Op::Append;
        break;
      case torch::Command::CompareSet:
        r.op = wire::Op::CompareSet;
        break;
      case torch::Command::Get:
        r.op = wire::Op::Get;
        break;
      case torch::Command::Add:
        r.op = wire::Op::Add;
        r.delta = q.number;
        break;
      case torch::Command::Check:
        r.op = wire::Op::Check;
        break;
      case torch::Command::Wait:
        r.op = wire::Op::Wait;
        break;
      case torch::Command::NumKeys:
        r.op = wire::Op::CountKeys;
        r.keys.emplace_back();  // no prefix: every key
        break;
      case torch::Command::Delete:
        r.op = wire::Op::Delete;
        break;
      case torch::Command::MultiGet:
        r.op = wire::Op::MultiGet;
        break;
      case torch::Command::MultiSet:
        r.op = wire::Op::MultiSet;
        break;
      default:
        return;
    }
    // An empty list: torch's server answers at once, and so does this one.
    if (r.keys.empty()) {
      if (r.op == wire::Op::Check) return torch_send({torch::kCheckReady});
      if (r.op == wire::Op::Wait) return torch_send({torch::kStopWaiting});
      if (r.op == wire::Op::MultiGet || r.op == wire::Op::MultiSet) return;
    }
    if (auto error = wire::check_limits(r, server_.options().limits)) {
      return close(spdlog::level::warn,
                   fmt::format("refused a torch {} query: {}", torch::command_name(q.command),
                               *error));
    }
    torch_pending_[r.id] = TorchPending{
        q.command, q.command == torch::Command::CompareSet ? q.values[0] : std::string()};
    server_.state().handle(*this, r);
  }

  // A collie reply frame, rewritten for the torch query it answers.
  void torch_reply(const std::vector<std::uint8_t>& frame) {
    if (frame.size() < wire::kFrameHeaderBytes) return;
    wire::Reader rd(std::span<const std::uint8_t>(frame).subspan(wire::kFrameHeaderBytes));
    const auto status = static_cast<wire::ReplyStatus>(rd.u8());
    const std::uint32_t id = rd.u32();
    auto it = torch_pending_.find(id);
    if (it == torch_pending_.end()) return;  // a wait it cancelled
    const TorchPending pending = std::move(it->second);
    torch_pending_.erase(it);
    if (status != wire::ReplyStatus::Ok) {
      rd.u16();
      const std::string why(rd.bytes());
      return close(spdlog::level::warn,
                   fmt::format("a torch {} query failed, and torch's protocol has no way to say "
                               "so: {}",
                               torch::command_name(pending.command), why));
    }
    std::vector<std::uint8_t> out;
    switch (pending.command) {
      case torch::Command::Set:
      case torch::Command::Append:
      case torch::Command::MultiSet:
        return;  // torch expects no reply
      case torch::Command::Get:
        torch::put_bytes(out, rd.bytes());
        break;
      case torch::Command::CompareSet: {
        rd.u8();  // swapped
        const bool exists = rd.u8() != 0;
        const auto current = rd.bytes();
        // As torch's own server: a missing key (and an expected value that
        // is not empty) answers with the expected value.
        torch::put_bytes(out, exists ? current : std::string_view(pending.expected));
        break;
      }
      case torch::Command::Add:
      case torch::Command::NumKeys:
        torch::put_i64(out, rd.i64());
        break;
      case torch::Command::Check:
        torch::put_u8(out, rd.u8() != 0 ? torch::kCheckReady : torch::kCheckNotReady);
        break;
      case torch::Command::Wait:
        torch::put_u8(out, torch::kStopWaiting);
        break;
      case torch::Command::Delete:
        torch::put_i64(out, rd.u8() != 0 ? 1 : 0);
        break;
      case torch::Command::MultiGet: {
        const std::uint32_t n = rd.u32();
        for (std::uint32_t i = 0; i < n && rd.ok(); ++i)
          torch::put_bytes(out, rd.bytes());
        break;
      }
      default:
        return;
    }
    if (!rd.ok()) return close(spdlog::level::err, "a reply it could not rewrite for torch");
    torch_send(std::move(out));
  }

  // A query begun and then not continued for the handshake timeout holds
  // memory nobody else may use: the connection is closed.
  void torch_watch_stall(Clock::duration after) {
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->phase_ != Phase::Torch) return;
      self->stall_armed_ = false;
      if (self->torch_in_.empty()) return;
      const Clock::duration stall = self->server_.options().handshake_timeout;
      const auto idle = Clock::now() - self->last_activity_;
      if (idle < stall) {
        self->stall_armed_ = true;
        return self->torch_watch_stall(stall - idle);
      }
      self->close(spdlog::level::warn,
                  fmt::format("it sent part of a torch TCPStore query, then nothing for {}",
                              seconds_text(idle)));
    });
  }

  void torch_send(std::vector<std::uint8_t> bytes) {
    server_.budget().take(bytes.size());
    out_.push(std::move(bytes));
    write();
  }

  // --- idle connections --------------------------------------------------------

  void arm_idle_timer(Clock::duration after) {
    if (server_.options().idle_timeout <= std::chrono::milliseconds::zero()) return;
    arm_timer(after);
  }
  void arm_timer(Clock::duration after) {
    timer_.expires_after(after);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec) self->on_idle_timer();
    });
  }

  void on_idle_timer() {
    stall_armed_ = false;
    if (phase_ != Phase::Ready || close_after_write_) return;
    const auto idle = Clock::now() - last_activity_;
    if (in_.buffered() > 0 || skip_ > 0) {
      // Part of a request, then silence: it holds memory (perhaps a large
      // reservation) that nobody else may use.
      const Clock::duration stall = server_.options().handshake_timeout;
      if (idle < stall) {
        stall_armed_ = true;
        return arm_timer(stall - idle);
      }
      // Bytes wait in the socket while this server would read them: the
      // server is behind (a loaded host), not the client. (A connection it
      // does not read, for its client's unread replies, is not excused.)
      std::error_code ec;
      if (taking_requests() && socket_.available(ec) > 0 && !ec) {
        stall_armed_ = true;
        return arm_timer(stall);
      }
      return close(
          spdlog::level::warn,
          fmt::format("it sent part of a request, then nothing for {}", seconds_text(idle)));
    }
    const auto limit = server_.options().idle_timeout;
    if (limit <= std::chrono::milliseconds::zero()) return;
    if (idle < limit || server_.state().has_parked(*this)) {
      return arm_idle_timer(idle < limit ? limit - idle : Clock::duration(limit));
    }
    const auto text = fmt::format(
        "the store closed this connection after {} without a request "
        "(its idle timeout); nothing was lost",
        seconds_text(idle));
    if (!out_.empty()) {
      // Its client reads nothing either: no point in saying goodbye.
      return close(
          spdlog::level::info,
          fmt::format("idle for {}, and its client does not read its replies", seconds_text(idle)));
    }
    deliver(wire::error_reply(0, wire::ErrorCode::Idle, text));
    close_after_write_ = true;
    close_reason_ = fmt::format("idle for {} (the server's idle timeout)", seconds_text(idle));
    close_level_ = spdlog::level::debug;
  }

  // --- requests ----------------------------------------------------------------

  // Waits for bytes without holding a buffer: an idle connection costs no memory.
  void read() {
    reading_ = true;
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](std::error_code ec) {
      self->reading_ = false;
      if (self->phase_ == Phase::Closed) return;
      if (ec) return self->lost(ec);
      self->receive();
    });
  }

  void receive() {
    std::error_code ec;
    std::size_t n = 0;
    if (skip_ > 0) {
      // The rest of a refused frame: read and dropped.
      std::array<std::uint8_t, 16384> scratch;
      n = socket_.read_some(
          asio::buffer(scratch.data(), std::min<std::size_t>(scratch.size(), skip_)), ec);
      if (!ec) skip_ -= n;
    } else {
      const auto space = in_.prepare();
      n = socket_.read_some(asio::buffer(space.data(), space.size()), ec);
      if (!ec) in_.commit(n);
    }
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      account_input();
      return read();
    }
    if (ec) return lost(ec);
    last_activity_ = Clock::now();
    account_input();
    process();
  }

  bool taking_requests() const {
    if (phase_ != Phase::Ready || close_after_write_) return false;
    // Replies pile up: its client sends without reading. Wait for it.
    if (out_.bytes() > std::max<std::size_t>(server_.options().limits.max_message_bytes, 1 << 20))
      return false;
    if (out_.owned_bytes() > kOwnedBacklog) return false;
    // Short of memory: only connections whose replies are all sent go on.
    if (server_.budget().over() && !out_.empty()) return false;
    return true;
  }

  // Handles the complete requests received, then reads on, unless replies
  // have piled up or memory is short (see taking_requests); then reading
  // waits until the writes drain.
  void process() {
    std::span<const std::uint8_t> body;
    while (skip_ == 0 && taking_requests()) {
      const auto next = in_.next(body);
      if (next == wire::FrameBuffer::Next::NeedMore) {
        if (admit_frame()) continue;  // refused: go on after it
        break;
      }
      if (next == wire::FrameBuffer::Next::TooLarge) {
        return refuse(0,
                      fmt::format("a request of {} bytes exceeds the store's limit of {} "
                                  "bytes per message",
                                  in_.frame_length(), server_.options().limits.max_message_bytes));
      }
      auto parsed = wire::parse_request(body, server_.options().limits);
      switch (parsed.kind) {
        case wire::ParsedRequest::Kind::Ok:
          // The request's own bytes are on their way out of the buffer: a
          // value is not counted twice (in the buffer and stored) when the
          // state decides whether it fits.
          server_.budget().give(in_counted_);
          in_counted_ = 0;
          server_.state().handle(*this, parsed.request);
          break;
        case wire::ParsedRequest::Kind::LimitExceeded:
          deliver(
              wire::error_reply(parsed.request.id, wire::ErrorCode::LimitExceeded, parsed.error));
          break;
        case wire::ParsedRequest::Kind::Malformed:
          return refuse(parsed.request.id, "malformed request: " + parsed.error);
      }
    }
    if (in_.buffered() == 0) {
      in_.release();
    } else if (!stall_armed_) {
      // A request under way must keep coming (see on_idle_timer).
      stall_armed_ = true;
      arm_timer(server_.options().handshake_timeout);
    }
    account_input();
    server_.maybe_trim();
    if (phase_ == Phase::Ready && !close_after_write_ && !reading_ &&
        (skip_ > 0 || taking_requests())) {
      read();
    }
  }

  // A frame larger than kFreeFrameBytes is received only if the memory
  // budget has room for all of it; otherwise it is answered "the store is
  // full" and its bytes are dropped as they come. True if it was refused
  // (the caller goes on with what follows it).
  bool admit_frame() {
    const auto length = in_.next_length();
    if (!length) return false;
    const std::size_t need = wire::kFrameHeaderBytes + *length;
    if (need <= kFreeFrameBytes || need <= in_counted_) return false;
    if (server_.budget().fits(need - in_counted_)) {
      server_.budget().take(need - in_counted_);
      in_counted_ = need;
      in_.reserve(need);
      return false;
    }
    const auto bytes = in_.buffered_bytes();
    if (bytes.size() < wire::kFrameHeaderBytes + 5) return false;  // its id is not here yet
    wire::Reader header(bytes.subspan(wire::kFrameHeaderBytes));
    const auto op = header.u8();
    const auto id = header.u32();
    deliver(wire::error_reply(
        id, wire::ErrorCode::StoreFull,
        fmt::format("a request of {} bytes (op {}): the store is full: it holds {} of its {} "
                    "bytes of memory (stored values, blocked requests and buffers); try again "
                    "later, or give the server more (collie store serve --max-memory)",
                    *length, op, server_.budget().used(), server_.budget().limit())));
    skip_ = need - bytes.size();
    in_.drop();
    return true;
  }

  // Keeps the memory budget up to date with what the receive buffer holds.
  void account_input() {
    std::size_t hold = in_.capacity();
    if (in_counted_ > hold && in_.buffered() > 0) hold = in_counted_;  // an admitted frame
    if (hold > in_counted_) {
      server_.budget().take(hold - in_counted_);
    } else {
      server_.budget().give(in_counted_ - hold);
    }
    in_counted_ = hold;
  }

  // Replies with an error, then closes once it is sent.
  void refuse(std::uint32_t id, std::string reason) {
    deliver(wire::error_reply(id, wire::ErrorCode::Malformed, reason));
    close_after_write_ = true;
    close_reason_ = std::move(reason);
  }

  void write() {
    auto buffers = out_.start();
    if (buffers.empty()) return;
    asio::async_write(socket_, buffers,
                      [self = shared_from_this()](std::error_code ec, std::size_t) {
                        if (self->phase_ == Phase::Closed) return;
                        self->server_.budget().give(self->out_.finish());
                        if (ec) return self->lost(ec);
                        self->last_activity_ = Clock::now();
                        if (!self->out_.empty()) return self->write();
                        if (self->close_after_write_) {
                          return self->close(self->close_level_, self->close_reason_);
                        }
                        // Replies drained: resume a paused reader.
                        if (self->phase_ == Phase::Ready) self->process();
                        if (self->phase_ == Phase::Torch) self->torch_process();
                      });
  }

  ServerCore& server_;
  tcp::socket socket_;
  asio::steady_timer handshake_timer_;
  asio::steady_timer timer_;  // the proof's turn, then the idle timeout
  std::string peer_;          // address:port, for the log
  std::string address_;       // the address alone, for the limits
  std::optional<wire::HelloStatus> refusal_;
  Clock::time_point accepted_at_ = Clock::now();
  Phase phase_ = Phase::Hello;
  bool first_byte_ = false;  // the connection has said something
  std::array<std::uint8_t, wire::kClientHelloBytes> hello_in_{};
  wire::Proof proof_in_{};
  wire::Nonce client_nonce_{};
  wire::Nonce server_nonce_{};
  bool client_has_token_ = false;
  wire::FrameBuffer in_;
  std::size_t in_counted_ = 0;  // bytes of the budget the receive buffer holds
  std::size_t skip_ = 0;        // bytes of a refused frame still to drop
  FrameQueue out_;
  Clock::time_point last_activity_{};
  bool stall_armed_ = false;  // the timer watches a request under way
  bool reading_ = false;
  bool close_after_write_ = false;
  // torch's TCPStore clients.
  struct TorchPending {
    torch::Command command;
    std::string expected;  // COMPARE_SET's expected value
  };
  std::optional<torch::Dialect> dialect_;
  std::vector<std::uint8_t> torch_in_;
  std::size_t torch_counted_ = 0;
  std::uint32_t torch_next_id_ = 0;
  std::map<std::uint32_t, TorchPending> torch_pending_;
  std::string close_reason_;
  spdlog::level::level_enum close_level_ = spdlog::level::warn;
};

ServerCore::ServerCore(ServerOptions options)
    : options_(std::move(options)),
      budget_(options_.max_memory_bytes),
      address_log_(io_, options_.log_interval),
      state_(options_.limits, options_.max_waits_per_connection, &budget_, options_.max_waits) {
  if (options_.limits.max_message_bytes < wire::kMinMessageBytes) {
    throw ArgumentError(
        fmt::format("store server: max_message_bytes must be at least {}", wire::kMinMessageBytes));
  }
  port_ = options_.port;
  std::string errors;
  if (options_.host.empty()) {
    // One dual-stack socket serves IPv6 and IPv4; without IPv6, IPv4 alone.
    auto ec = try_listen(tcp::endpoint(asio::ip::address_v6::any(), port_), false);
    if (ec) {
      log().info("store: IPv6 is not available ({}); listening on IPv4 only", ec.message());
      ec = try_listen(tcp::endpoint(asio::ip::address_v4::any(), port_), false);
    }
    if (ec) errors = ec.message();
  } else {
    tcp::resolver resolver(io_);
    std::error_code ec;
    const auto results =
        resolver.resolve(options_.host, std::to_string(options_.port), tcp::resolver::passive, ec);
    if (ec) {
      throw Error(fmt::format("store: cannot listen on '{}': the host does not resolve ({})",
                              options_.host, ec.message()));
    }
    std::set<tcp::endpoint> seen;
    for (const auto& entry : results) {
      auto endpoint = entry.endpoint();
      endpoint.port(port_);
      if (!seen.insert(endpoint).second) continue;
      if (auto error = try_listen(endpoint, true)) {
        errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", endpoint_text(endpoint),
                              error.message());
      }
    }
  }
  if (acceptors_.empty()) {
    throw Error(fmt::format("store: cannot listen on {}:{}: {}",
                            options_.host.empty() ? "*" : options_.host, options_.port, errors));
  }
  if (!errors.empty()) log().info("store: some addresses could not be used: {}", errors);
  for (auto& acceptor : acceptors_)
    accept(*acceptor);
  thread_ = std::thread([this] {
    while (true) {
      try {
        run();
        return;
      } catch (const std::exception& e) {
        log().error("store: unexpected error in the server loop: {}", e.what());
      }
    }
  });
}

void ServerCore::run() {
  // Poll while requests keep coming (options.spin), sleep in the reactor
  // when they stop: a busy client pays no wake-up per request, an idle
  // server burns no CPU.
  auto last_work = Clock::now();
  while (!io_.stopped()) {
    if (io_.poll() > 0) {
      last_work = Clock::now();
    } else if (Clock::now() - last_work < options_.spin) {
      std::this_thread::yield();
    } else if (io_.run_one() > 0) {
      last_work = Clock::now();
    }
  }
}

ServerCore::~ServerCore() {
  stop();
}

std::error_code ServerCore::try_listen(tcp::endpoint endpoint, bool v6_only) {
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  std::error_code ec;
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && endpoint.address().is_v6()) acceptor->set_option(asio::ip::v6_only(v6_only), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(system_max_backlog(), ec);
  if (ec) return ec;
  const auto local = acceptor->local_endpoint(ec);
  if (ec) return ec;
  port_ = local.port();  // the real port, also for the next address when it was 0
  addresses_.push_back(endpoint_text(local));
  acceptors_.push_back(std::move(acceptor));
  accept_retry_.push_back(std::make_unique<asio::steady_timer>(io_));
  return {};
}

void ServerCore::accept(tcp::acceptor& acceptor) {
  acceptor.async_accept([this, &acceptor](std::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors, typically: wait a little instead of spinning.
      log().warn(
          "store: accepting a connection failed: {} (raise the open-file limit, ulimit -n, "
          "if this is 'too many open files'); retrying in 100 ms",
          ec.message());
      std::size_t index = 0;
      while (acceptors_[index].get() != &acceptor)
        ++index;
      accept_retry_[index]->expires_after(std::chrono::milliseconds(100));
      accept_retry_[index]->async_wait([this, &acceptor](std::error_code wait_ec) {
        if (!wait_ec) accept(acceptor);
      });
      return;
    }
    admit(std::move(socket));
    accept(acceptor);
  });
}

void ServerCore::admit(tcp::socket socket) {
  std::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  auto ip = remote.address();
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    ip = asio::ip::make_address_v4(asio::ip::v4_mapped, ip.to_v6());
  }
  const std::string address = ip.to_string();
  std::optional<wire::HelloStatus> refusal;
  auto at_address_limit = [&] {
    const auto from_here = per_address_.find(address);
    return from_here != per_address_.end() &&
           from_here->second >= options_.max_connections_per_address;
  };
  // At a limit, a newcomer takes the place of a stranger stuck in its handshake.
  if (served_ >= options_.max_connections) make_way(handshaking_all_);
  if (served_ >= options_.max_connections) {
    refusal = wire::HelloStatus::TooManyConnections;
  } else if (at_address_limit()) {
    if (auto h = handshaking_.find(address); h != handshaking_.end()) make_way(h->second);
    if (at_address_limit()) refusal = wire::HelloStatus::TooManyFromAddress;
  }
  if (refusal) {
    ++refused_;
    if (refusing_ >= kMaxRefusing) {
      address_log_.log(spdlog::level::warn, address,
                       fmt::format("store: closed a connection from {} at once: {}", address,
                                   *refusal == wire::HelloStatus::TooManyConnections
                                       ? "the server is at its connection limit"
                                       : "that address is at its connection limit"));
      return;  // the socket closes here
    }
  }
  socket.set_option(tcp::no_delay(true), ec);
  // A client whose host is lost frees what it holds within about 20 s.
  set_keep_alive(socket.native_handle(), 10, 2, 5);
  auto session = std::make_shared<Session>(*this, std::move(socket), address, refusal);
  sessions_.insert(session);
  if (!refusal) {
    handshaking_[address].push_back(session);
    handshaking_all_.push_back(session);
  }
  if (refusal) {
    ++refusing_;
  } else {
    ++served_;
    ++per_address_[address];
  }
  connections_.store(served_);
  session->start();
}

// Strangers cannot hold a connection limit against real clients by keeping
// connections open in the handshake: at a limit, the oldest connection still
// in its handshake after kStuckInHandshake is closed to make way for the
// newcomer. A real client's handshake takes one round trip, so only a
// client that says nothing (or stops half-way) is ever chosen. Returns
// false if there was none to close.
bool ServerCore::make_way(std::deque<std::weak_ptr<Session>>& queue) {
  const auto now = Clock::now();
  while (!queue.empty()) {
    const auto oldest = queue.front().lock();
    if (!oldest || !oldest->in_handshake()) {
      queue.pop_front();
      continue;
    }
    if (now - oldest->accepted_at() < kStuckInHandshake) return false;
    queue.pop_front();
    ++evicted_;
    oldest->close(spdlog::level::warn,
                  fmt::format("closed to make way for a new connection: at a connection limit, "
                              "and it had not finished its handshake after {}",
                              seconds_text(now - oldest->accepted_at())));
    return true;
  }
  return false;
}

void ServerCore::remove(const std::shared_ptr<Session>& session) {
  if (sessions_.erase(session) == 0) return;
  if (session->refusing()) {
    --refusing_;
  } else {
    --served_;
    auto it = per_address_.find(session->address());
    if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
    // Forget connections past their handshake, from the front of the queues.
    if (auto h = handshaking_.find(session->address()); h != handshaking_.end()) {
      auto& q = h->second;
      while (!q.empty()) {
        const auto front = q.front().lock();
        if (front && front != session && front->in_handshake()) break;
        q.pop_front();
      }
      if (q.empty()) handshaking_.erase(h);
    }
    while (!handshaking_all_.empty()) {
      const auto front = handshaking_all_.front().lock();
      if (front && front != session && front->in_handshake()) break;
      handshaking_all_.pop_front();
    }
  }
  connections_.store(served_);
}

StoreServer::Stats ServerCore::stats() {
  std::promise<StoreServer::Stats> promise;
  auto future = promise.get_future();
  asio::post(io_, [this, &promise] {
    StoreServer::Stats s;
    s.connections = served_;
    s.keys = state_.keys();
    s.blocked = state_.parked();
    s.memory_bytes = budget_.used();
    s.auth_failures = auth_failures_;
    s.refused = refused_;
    s.evicted = evicted_;
    promise.set_value(s);
  });
  if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    throw Error("store: the server thread did not answer within 30 s (is it stopped?)");
  }
  return future.get();
}

void ServerCore::shutdown() {
  std::error_code ignored;
  for (auto& acceptor : acceptors_)
    acceptor->close(ignored);
  for (auto& timer : accept_retry_)
    timer->cancel();
  const auto sessions = sessions_;
  for (const auto& session : sessions)
    session->close(spdlog::level::debug, "the server is stopping");
  address_log_.cancel();
  io_.stop();
}

void ServerCore::stop() {
  std::call_once(stopped_, [this] {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] { shutdown(); });
    thread_.join();
  });
}

}  // namespace

class StoreServer::Impl : public ServerCore {
 public:
  using ServerCore::ServerCore;
};

StoreServer::StoreServer(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
StoreServer::~StoreServer() = default;
std::uint16_t StoreServer::port() const {
  return impl_->port();
}
std::vector<std::string> StoreServer::addresses() const {
  return impl_->addresses();
}
std::size_t StoreServer::connections() const {
  return impl_->connections();
}
StoreServer::Stats StoreServer::stats() const {
  return impl_->stats();
}
void StoreServer::stop() {
  impl_->stop();
}

std::uint64_t raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

}  // namespace collie::store
