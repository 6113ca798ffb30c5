#include <atomic>
#include <fstream>
#include <mutex>
#include <set>
#include <sys/resource.h>
#include <thread>

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
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/store/server.hpp>

#include "auth.hpp"
#include "frame_queue.hpp"
#include "key_value_state.hpp"
#include "protocol.hpp"

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

// The server without its public face: listeners, connections, data.
// Everything below runs on the one I/O thread.
class ServerCore {
 public:
  explicit ServerCore(ServerOptions options);
  ~ServerCore();

  std::uint16_t port() const { return port_; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  std::size_t connections() const { return connections_.load(); }
  void stop();

  const ServerOptions& options() const { return options_; }
  KeyValueState& state() { return state_; }
  void remove(const std::shared_ptr<Session>& session);

 private:
  std::error_code try_listen(tcp::endpoint endpoint, bool v6_only);
  void accept(tcp::acceptor& acceptor);
  void run();
  void shutdown();

  ServerOptions options_;
  asio::io_context io_{1};
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  std::vector<std::unique_ptr<asio::steady_timer>> accept_retry_;
  std::set<std::shared_ptr<Session>> sessions_;
  KeyValueState state_;
  std::uint16_t port_ = 0;
  std::vector<std::string> addresses_;
  std::atomic<std::size_t> connections_{0};
  std::thread thread_;
  std::once_flag stopped_;
};

// One client connection: handshake, then a stream of requests and replies.
class Session final : public ReplyTarget, public std::enable_shared_from_this<Session> {
 public:
  Session(ServerCore& server, tcp::socket socket)
      : server_(server),
        socket_(std::move(socket)),
        handshake_timer_(socket_.get_executor()),
        in_(server.options().limits.max_message_bytes) {
    std::error_code ec;
    const auto remote = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : endpoint_text(remote);
  }

  void start() {
    handshake_timer_.expires_after(server_.options().handshake_timeout);
    handshake_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->phase_ == Phase::Ready || self->phase_ == Phase::Closed) return;
      self->close(spdlog::level::warn,
                  fmt::format("no complete handshake within {} ms",
                              self->server_.options().handshake_timeout.count()));
    });
    asio::async_read(socket_, asio::buffer(hello_in_),
                     [self = shared_from_this()](std::error_code ec, std::size_t) {
                       if (ec) return self->lost(ec);
                       self->on_client_hello();
                     });
  }

  void deliver(std::vector<std::uint8_t> frame) override {
    if (phase_ == Phase::Closed) return;
    out_.push(std::move(frame));
    write();
  }

  void close(spdlog::level::level_enum level, std::string_view reason) {
    if (phase_ == Phase::Closed) return;
    const bool was_ready = phase_ == Phase::Ready;
    phase_ = Phase::Closed;
    log().log(level, "store: closed the connection from {}: {}", peer_, reason);
    if (was_ready) server_.state().forget(*this);
    std::error_code ignored;
    handshake_timer_.cancel();
    socket_.close(ignored);
    out_.clear();
    server_.remove(shared_from_this());
  }

 private:
  enum class Phase { Hello, Proof, Ready, Closed };

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

  void on_client_proof() {
    const auto expected = auth::client_proof(server_.options().token, client_nonce_, server_nonce_);
    if (!client_has_token_ || !crypto::digests_equal(proof_in_, expected)) {
      log().warn("store: refused {}: authentication failed ({})", peer_,
                 client_has_token_ ? "wrong token" : "the client has no token");
      close_after_write_ = true;
      close_reason_ = "authentication failed";
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
    log().debug("store: {} connected", peer_);
    read();
  }

  void read() {
    reading_ = true;
    const auto space = in_.prepare();
    socket_.async_read_some(asio::buffer(space.data(), space.size()),
                            [self = shared_from_this()](std::error_code ec, std::size_t n) {
                              self->reading_ = false;
                              if (self->phase_ == Phase::Closed) return;
                              if (ec) return self->lost(ec);
                              self->in_.commit(n);
                              self->process();
                            });
  }

  // Handles the complete requests received, then reads on, unless replies
  // have piled up (a client that sends without reading): then reading waits
  // until the writes drain, which bounds the memory one client can take.
  void process() {
    std::span<const std::uint8_t> body;
    while (phase_ == Phase::Ready && !close_after_write_ && !backlogged()) {
      const auto next = in_.next(body);
      if (next == wire::FrameBuffer::Next::NeedMore) break;
      if (next == wire::FrameBuffer::Next::TooLarge) {
        return refuse(0,
                      fmt::format("a request of {} bytes exceeds the store's limit of {} "
                                  "bytes per message",
                                  in_.frame_length(), server_.options().limits.max_message_bytes));
      }
      auto parsed = wire::parse_request(body, server_.options().limits);
      switch (parsed.kind) {
        case wire::ParsedRequest::Kind::Ok:
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
    if (phase_ == Phase::Ready && !close_after_write_ && !backlogged() && !reading_) read();
  }

  bool backlogged() const {
    return out_.bytes() >
           std::max<std::size_t>(server_.options().limits.max_message_bytes, 1 << 20);
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
                        self->out_.finish();
                        if (ec) return self->lost(ec);
                        if (!self->out_.empty()) return self->write();
                        if (self->close_after_write_) {
                          return self->close(spdlog::level::warn, self->close_reason_);
                        }
                        // Replies drained: resume a paused reader.
                        if (self->phase_ == Phase::Ready) self->process();
                      });
  }

  ServerCore& server_;
  tcp::socket socket_;
  asio::steady_timer handshake_timer_;
  std::string peer_;
  Phase phase_ = Phase::Hello;
  std::array<std::uint8_t, wire::kClientHelloBytes> hello_in_{};
  wire::Proof proof_in_{};
  wire::Nonce client_nonce_{};
  wire::Nonce server_nonce_{};
  bool client_has_token_ = false;
  wire::FrameBuffer in_;
  FrameQueue out_;
  bool reading_ = false;
  bool close_after_write_ = false;
  std::string close_reason_;
};

ServerCore::ServerCore(ServerOptions options)
    : options_(std::move(options)), state_(options_.limits, options_.max_waits_per_connection) {
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
  using Clock = std::chrono::steady_clock;
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
    std::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    auto session = std::make_shared<Session>(*this, std::move(socket));
    sessions_.insert(session);
    connections_.store(sessions_.size());
    session->start();
    accept(acceptor);
  });
}

void ServerCore::remove(const std::shared_ptr<Session>& session) {
  sessions_.erase(session);
  connections_.store(sessions_.size());
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
