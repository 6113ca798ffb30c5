#include <algorithm>
#include <chrono>
#include <random>
#include <unordered_map>

#include <asio/connect.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/duration.hpp>
#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/store/async_client.hpp>

#include "auth.hpp"
#include "frame_queue.hpp"
#include "protocol.hpp"

namespace collie::store {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

void Failure::raise() const {
  switch (kind) {
    case Kind::Connection:
      throw ConnectionError(message);
    case Kind::Authentication:
      throw AuthenticationError(message);
    case Kind::Protocol:
      throw ProtocolError(message);
    case Kind::Request:
      throw RequestError(message);
    case Kind::TimedOut:
      throw TimeoutError(message);
  }
  throw Error(message);
}

namespace {

bool is_blocking(wire::Op op) {
  return op == wire::Op::Get || op == wire::Op::Wait || op == wire::Op::MultiGet ||
         op == wire::Op::Barrier;
}

// Decodes a successful reply's payload (reader set) or reports a failure
// (failure set), then calls the user's handler.
using Decoder = std::function<void(const Failure*, wire::Reader*)>;

constexpr auto kMinHandshakeTime = std::chrono::seconds(1);

}  // namespace

class AsyncStoreClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, ClientOptions options)
      : io_(io),
        options_(std::move(options)),
        socket_(io),
        resolver_(io),
        timer_(io),
        in_(limits_.max_message_bytes) {}

  void connect(std::string host, std::uint16_t port, Handler<Done> done) {
    host_ = std::move(host);
    port_ = port;
    address_ = join_host_port(host_, port);
    on_connected_ = std::move(done);
    connect_started_ = Clock::now();
    connect_deadline_ = connect_started_ + options_.connect_timeout.value_or(options_.timeout);
    attempt();
  }

  RequestId send(wire::Request& request, Decoder decoder) {
    request.id = next_id_++;
    // The server closes connections idle for its idle timeout: one idle for
    // half of it is replaced before it carries a request, so no request
    // meets a connection the server is closing.
    if (state_ == State::Ready && pending_.empty() && idle_timeout_ > Clock::duration::zero() &&
        Clock::now() - last_io_ >= idle_timeout_ / 2) {
      reconnect();
    }
    if (state_ == State::Resting) reconnect();
    if (state_ != State::Ready && !reconnecting_) {
      fail_later(std::move(decoder), Failure{Failure::Kind::Connection, not_ready_reason()});
      return request.id;
    }
    if (auto error = wire::check_limits(request, limits_)) {
      fail_later(std::move(decoder), Failure{Failure::Kind::Request, std::move(*error)});
      return request.id;
    }
    pending_.emplace(request.id, Pending{request.op, std::move(decoder)});
    if (reconnecting_) {
      held_.emplace_back(request.id, wire::encode(request));
    } else {
      enqueue(wire::encode(request));
    }
    return request.id;
  }

  void abandon(RequestId id) {
    auto it = pending_.find(id);
    if (it == pending_.end()) return;
    const bool cancel = is_blocking(it->second.op);
    pending_.erase(it);
    if (reconnecting_) {
      std::erase_if(held_, [id](const auto& held) { return held.first == id; });
      return;
    }
    if (cancel && state_ == State::Ready) {
      wire::Request request;
      request.op = wire::Op::Cancel;
      request.id = next_id_++;
      request.number = id;
      enqueue(wire::encode(request));
    }
  }

  void close() {
    fail(fmt::format("the connection to the store at {} was closed by this client", address_));
  }

  const std::string& address() const { return address_; }
  const StoreLimits& limits() const { return limits_; }
  const ClientOptions& options() const { return options_; }

 private:
  // Resting: the server closed the connection as idle; the next request
  // reconnects first.
  enum class State { Idle, Connecting, Handshake, Ready, Resting, Broken };
  struct Pending {
    wire::Op op;
    Decoder decoder;
  };

  std::string not_ready_reason() const {
    if (state_ == State::Broken) return broken_reason_;
    return fmt::format("the client of the store at {} is not connected yet", address_);
  }

  void fail_later(Decoder decoder, Failure failure) {
    asio::post(io_, [decoder = std::move(decoder), failure = std::move(failure)] {
      decoder(&failure, nullptr);
    });
  }

  // --- connecting -------------------------------------------------------------

  void attempt() {
    state_ = State::Connecting;
    ++attempts_;
    resolver_.async_resolve(
        host_, std::to_string(port_),
        [self = shared_from_this()](std::error_code ec, tcp::resolver::results_type results) {
          if (self->state_ != State::Connecting) return;
          if (ec)
            return self->retry(fmt::format("cannot resolve '{}': {}", self->host_, ec.message()));
          asio::async_connect(self->socket_, results,
                              [self](std::error_code ec2, const tcp::endpoint&) {
                                if (self->state_ != State::Connecting) return;
                                if (ec2) return self->retry(ec2.message());
                                self->start_handshake();
                              });
        });
  }

  void retry(const std::string& error) {
    state_ = State::Connecting;  // also from the handshake (a server at its limits)
    std::error_code ignored;
    socket_.close(ignored);
    const auto now = Clock::now();
    // Exponential backoff from 10 ms to 1 s, with +-25% jitter so that many
    // clients started together do not retry in lockstep.
    std::uniform_real_distribution<double> jitter(0.75, 1.25);
    auto delay = std::chrono::duration_cast<Clock::duration>(backoff_ * jitter(random_));
    backoff_ = std::min(backoff_ * 2, std::chrono::duration<double, std::milli>(1000.0));
    // The last attempt is made at the deadline itself.
    delay = std::min(delay, connect_deadline_ - now);
    if (now >= connect_deadline_) {
      return connect_failed(Failure{
          Failure::Kind::Connection,
          fmt::format("could not connect to the store at {}: tried for {} ({} attempts); last "
                      "error: {}. Is the store running there (check MASTER_ADDR/MASTER_PORT)?",
                      address_, describe_duration(now - connect_started_), attempts_, error)});
    }
    log().debug("store client: connecting to {} failed ({}); retrying in {} ms", address_, error,
                std::chrono::duration_cast<std::chrono::milliseconds>(delay).count());
    timer_.expires_after(delay);
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (!ec && self->state_ == State::Connecting) self->attempt();
    });
  }

  void connect_failed(Failure failure) {
    state_ = State::Broken;
    broken_reason_ = failure.message;
    std::error_code ignored;
    socket_.close(ignored);
    auto done = std::move(on_connected_);
    on_connected_ = nullptr;
    if (done) asio::post(io_, [done = std::move(done), failure] { done(&failure, Done{}); });
    if (reconnecting_) {
      // Requests held for a new connection fail as the first connect would.
      reconnecting_ = false;
      held_.clear();
      failure.message =
          "reconnecting after the server closed an idle connection: " + failure.message;
      auto pending = std::move(pending_);
      pending_.clear();
      for (auto& [id, p] : pending)
        fail_later(std::move(p.decoder), failure);
    }
  }

  // A fresh connection (and handshake) in place of an idle one; requests
  // sent meanwhile are held and go out once it is ready.
  void reconnect() {
    log().debug("store client: reconnecting to {} (the connection was idle)", address_);
    ++generation_;
    std::error_code ignored;
    socket_.close(ignored);
    socket_ = tcp::socket(io_);
    out_.clear();
    in_ = wire::FrameBuffer(limits_.max_message_bytes);
    reconnecting_ = true;
    attempts_ = 0;
    backoff_ = std::chrono::duration<double, std::milli>(10.0);
    connect_started_ = Clock::now();
    connect_deadline_ = connect_started_ + options_.connect_timeout.value_or(options_.timeout);
    attempt();
  }

  void start_handshake() {
    state_ = State::Handshake;
    std::error_code ignored;
    socket_.set_option(tcp::no_delay(true), ignored);
    // A store whose host is lost fails the client within about 6 s
    // (docs/failures.md), even while it only waits for a reply.
    set_keep_alive(socket_.native_handle(), 2, 1, 4);
    // Something listens there; it gets until the connect deadline (and at
    // least a second) to answer like a store.
    timer_.expires_at(std::max(connect_deadline_, Clock::now() + kMinHandshakeTime));
    proof_sent_ = false;
    timer_.async_wait([self = shared_from_this()](std::error_code ec) {
      if (ec || self->state_ != State::Handshake) return;
      const auto waited = describe_duration(Clock::now() - self->connect_started_);
      self->connect_failed(Failure{
          Failure::Kind::TimedOut,
          self->proof_sent_
              // A store slows down the proofs of an address that failed lately.
              ? fmt::format("the store at {} did not check this client's token within {}: it "
                            "slows down an address after too many failed attempts from it; "
                            "check that every client has the store's token, and retry later",
                            self->address_, waited)
              : fmt::format("the store at {} accepted the connection but did not complete the "
                            "handshake within {}; is a collie store listening there?",
                            self->address_, waited)});
    });
    client_nonce_ = auth::random_nonce();
    wire::ClientHello hello;
    hello.has_token = !options_.token.empty();
    hello.nonce = client_nonce_;
    hello_out_ = wire::encode(hello);
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(hello_out_), [self](std::error_code ec, std::size_t) {
      if (ec) return self->handshake_io_failed(ec);
      asio::async_read(self->socket_, asio::buffer(self->hello_in_),
                       [self](std::error_code ec2, std::size_t) {
                         if (ec2) return self->handshake_io_failed(ec2);
                         self->on_server_hello();
                       });
    });
  }

  void handshake_io_failed(std::error_code ec) {
    if (state_ != State::Handshake) return;
    connect_failed(Failure{Failure::Kind::Connection,
                           fmt::format("the store at {} closed the connection during the "
                                       "handshake ({}); is it a collie store of a compatible "
                                       "version, and does it use the same token?",
                                       address_, ec.message())});
  }

  void on_server_hello() {
    const auto hello = wire::decode_server_hello(hello_in_);
    if (hello.magic != wire::kMagic) {
      return connect_failed(
          Failure{Failure::Kind::Protocol,
                  fmt::format("{} is not a collie store: it answered the handshake with "
                              "0x{:08x} instead of the store's magic 0x{:08x}",
                              address_, hello.magic, wire::kMagic)});
    }
    if (hello.status == wire::HelloStatus::TooManyConnections ||
        hello.status == wire::HelloStatus::TooManyFromAddress) {
      // The limit may free up: retried until the connect timeout, like a refusal.
      return retry(hello.status == wire::HelloStatus::TooManyConnections
                       ? "the store serves as many connections as its limit allows (collie "
                         "store serve --max-connections)"
                       : "the store serves as many connections from this host's address as "
                         "its limit allows (collie store serve --max-connections-per-address)");
    }
    if (hello.status == wire::HelloStatus::UnsupportedVersion || hello.version != wire::kVersion) {
      return connect_failed(Failure{
          Failure::Kind::Protocol,
          fmt::format("the store at {} speaks protocol version {}, this client speaks version {}; "
                      "use the same collie release on both sides",
                      address_, hello.version, wire::kVersion)});
    }
    if (hello.limits.max_message_bytes < wire::kMinMessageBytes) {
      return connect_failed(
          Failure{Failure::Kind::Protocol,
                  fmt::format("the store at {} announced a message limit of {} bytes, below the "
                              "protocol's minimum of {}",
                              address_, hello.limits.max_message_bytes, wire::kMinMessageBytes)});
    }
    limits_ = hello.limits;
    idle_timeout_ = std::chrono::milliseconds(hello.idle_timeout_ms);
    in_.set_max_frame_bytes(limits_.max_message_bytes);
    const bool have_token = !options_.token.empty();
    if (!hello.auth_required) {
      if (have_token) {
        return connect_failed(Failure{
            Failure::Kind::Authentication,
            fmt::format("authentication failed: this client has a token but the store at {} "
                        "does not use one, so it cannot prove who it is; start the store with "
                        "the same token (COLLIE_STORE_TOKEN or --token-file) or unset the "
                        "client's token",
                        address_)});
      }
      return ready();
    }
    server_proof_ok_ =
        have_token &&
        crypto::digests_equal(hello.proof,
                              auth::server_proof(options_.token, client_nonce_, hello.nonce));
    proof_out_ =
        have_token ? auth::client_proof(options_.token, client_nonce_, hello.nonce) : wire::Proof{};
    auto self = shared_from_this();
    asio::async_write(socket_, asio::buffer(proof_out_), [self](std::error_code ec, std::size_t) {
      if (ec) return self->handshake_io_failed(ec);
      self->proof_sent_ = true;
      asio::async_read(self->socket_, asio::buffer(&self->auth_status_, 1),
                       [self](std::error_code ec2, std::size_t) {
                         if (ec2) return self->handshake_io_failed(ec2);
                         self->on_auth_status();
                       });
    });
  }

  void on_auth_status() {
    if (options_.token.empty()) {
      return connect_failed(Failure{
          Failure::Kind::Authentication,
          fmt::format("authentication failed: the store at {} requires a token; set "
                      "COLLIE_STORE_TOKEN (or the client's token option) to the store's token",
                      address_)});
    }
    if (auth_status_ == static_cast<std::uint8_t>(wire::AuthStatus::Throttled)) {
      return connect_failed(Failure{
          Failure::Kind::Authentication,
          fmt::format("authentication refused: the store at {} did not check this client's "
                      "token, because of too many failed attempts from this host's address in "
                      "the last minutes; check that every client has the store's token, and "
                      "retry in a minute",
                      address_)});
    }
    if (auth_status_ != static_cast<std::uint8_t>(wire::AuthStatus::Ok)) {
      return connect_failed(
          Failure{Failure::Kind::Authentication,
                  fmt::format("authentication failed: the store at {} refused this client's "
                              "token (the tokens differ)",
                              address_)});
    }
    if (!server_proof_ok_) {
      return connect_failed(
          Failure{Failure::Kind::Authentication,
                  fmt::format("authentication failed: the store at {} could not prove that it "
                              "knows the token; refusing to use it",
                              address_)});
    }
    ready();
  }

  void ready() {
    state_ = State::Ready;
    timer_.cancel();
    last_io_ = Clock::now();
    log().debug("store client: connected to {} after {} attempt(s)", address_, attempts_);
    read();
    if (reconnecting_) {
      reconnecting_ = false;
      auto held = std::move(held_);
      held_.clear();
      for (auto& [id, frame] : held)
        enqueue(std::move(frame));
    }
    auto done = std::move(on_connected_);
    on_connected_ = nullptr;
    if (done) asio::post(io_, [done = std::move(done)] { done(nullptr, Done{}); });
  }

  // --- requests and replies -----------------------------------------------------

  void enqueue(std::vector<std::uint8_t> frame) {
    out_.push(std::move(frame));
    write();
  }

  void write() {
    auto buffers = out_.start();
    if (buffers.empty()) return;
    asio::async_write(
        socket_, buffers,
        [self = shared_from_this(), generation = generation_](std::error_code ec, std::size_t) {
          if (generation != self->generation_) return;  // a connection replaced since
          self->out_.finish();
          self->last_io_ = Clock::now();
          if (ec) {
            return self->fail(
                fmt::format("lost the connection to the store at {} while sending: {}",
                            self->address_, ec.message()));
          }
          self->write();
        });
  }

  void read() {
    const auto space = in_.prepare();
    socket_.async_read_some(
        asio::buffer(space.data(), space.size()),
        [self = shared_from_this(), generation = generation_](std::error_code ec, std::size_t n) {
          if (self->state_ != State::Ready || generation != self->generation_) return;
          self->last_io_ = Clock::now();
          if (ec) {
            return self->fail(
                ec == asio::error::eof
                    ? fmt::format("the store at {} closed the connection", self->address_)
                    : fmt::format("lost the connection to the store at {}: {}", self->address_,
                                  ec.message()));
          }
          self->in_.commit(n);
          if (self->dispatch()) self->read();
        });
  }

  // Handles every complete reply received; false if the connection broke
  // (or a handler closed it).
  bool dispatch() {
    std::span<const std::uint8_t> body;
    while (state_ == State::Ready) {
      switch (in_.next(body)) {
        case wire::FrameBuffer::Next::NeedMore:
          return true;
        case wire::FrameBuffer::Next::TooLarge:
          fail(fmt::format("the store at {} sent a reply of {} bytes, over its own limit of {}",
                           address_, in_.frame_length(), limits_.max_message_bytes),
               Failure::Kind::Protocol);
          return false;
        case wire::FrameBuffer::Next::Frame:
          break;
      }
      wire::Reader reader(body);
      const auto status = reader.u8();
      const auto id = reader.u32();
      if (!reader.ok()) {
        fail(fmt::format("the store at {} sent a reply of {} bytes, too short for its header",
                         address_, body.size()),
             Failure::Kind::Protocol);
        return false;
      }
      if (id == 0 && status == static_cast<std::uint8_t>(wire::ReplyStatus::Error)) {
        // About the connection, not a request: the server closes it.
        const auto code = static_cast<wire::ErrorCode>(reader.u16());
        const auto message = std::string(reader.bytes());
        if (code == wire::ErrorCode::Idle && pending_.empty()) {
          rest();
          return false;
        }
        fail(fmt::format("the store at {} closed the connection: {}", address_, message),
             code == wire::ErrorCode::Idle ? Failure::Kind::Connection : Failure::Kind::Protocol);
        return false;
      }
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;  // an abandoned request's late reply
      Pending pending = std::move(it->second);
      pending_.erase(it);
      if (status == static_cast<std::uint8_t>(wire::ReplyStatus::Ok)) {
        pending.decoder(nullptr, &reader);
        if (!reader.at_end()) {
          fail(fmt::format("the store at {} sent a malformed reply to {}", address_,
                           wire::op_name(pending.op)),
               Failure::Kind::Protocol);
          return false;
        }
        continue;
      }
      const auto code = static_cast<wire::ErrorCode>(reader.u16());
      const auto message = reader.bytes();
      Failure failure{Failure::Kind::Request, std::string(message)};
      if (code == wire::ErrorCode::Malformed) failure.kind = Failure::Kind::Protocol;
      if (code == wire::ErrorCode::ShuttingDown) failure.kind = Failure::Kind::Connection;
      pending.decoder(&failure, nullptr);
    }
    return false;
  }

  // The server closed this idle connection; the next request reconnects.
  void rest() {
    log().debug("store client: the store at {} closed the idle connection", address_);
    state_ = State::Resting;
    ++generation_;
    std::error_code ignored;
    socket_.close(ignored);
    out_.clear();
  }

  void fail(std::string reason, Failure::Kind kind = Failure::Kind::Connection) {
    if (state_ == State::Broken) return;
    const State previous = state_;
    state_ = State::Broken;
    broken_reason_ = reason;
    std::error_code ignored;
    socket_.close(ignored);
    timer_.cancel();
    resolver_.cancel();
    out_.clear();
    if (previous != State::Ready) {
      return connect_failed(Failure{Failure::Kind::Connection, std::move(reason)});
    }
    log().debug("store client: {}", reason);
    auto pending = std::move(pending_);
    pending_.clear();
    for (auto& [id, p] : pending)
      fail_later(std::move(p.decoder), Failure{kind, reason});
  }

  asio::io_context& io_;
  ClientOptions options_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  asio::steady_timer timer_;
  StoreLimits limits_;
  wire::FrameBuffer in_;
  FrameQueue out_;
  State state_ = State::Idle;
  std::string broken_reason_;

  std::string host_;
  std::uint16_t port_ = 0;
  std::string address_;
  Handler<Done> on_connected_;
  Clock::time_point connect_started_;
  Clock::time_point connect_deadline_;
  int attempts_ = 0;
  std::chrono::duration<double, std::milli> backoff_{10.0};
  std::minstd_rand random_{std::random_device{}()};

  wire::Nonce client_nonce_{};
  std::array<std::uint8_t, wire::kClientHelloBytes> hello_out_{};
  std::array<std::uint8_t, wire::kServerHelloBytes> hello_in_{};
  wire::Proof proof_out_{};
  std::uint8_t auth_status_ = 0;
  bool server_proof_ok_ = false;
  bool proof_sent_ = false;  // waiting for the store's verdict on it

  RequestId next_id_ = 1;
  std::unordered_map<RequestId, Pending> pending_;

  // Idle connections (see send()).
  Clock::duration idle_timeout_{};
  Clock::time_point last_io_{};
  bool reconnecting_ = false;
  std::vector<std::pair<RequestId, std::vector<std::uint8_t>>> held_;
  std::uint64_t generation_ = 0;  // of the connection; handlers of older ones do nothing
};

// --- the public operations ----------------------------------------------------------

namespace {

wire::Request make(wire::Op op, std::initializer_list<std::string_view> keys = {},
                   std::initializer_list<std::string_view> values = {}) {
  wire::Request request;
  request.op = op;
  request.keys.assign(keys.begin(), keys.end());
  request.values.assign(values.begin(), values.end());
  return request;
}

// Wraps a typed handler into a Decoder that reads the reply with `read`.
template <class T, class Read>
Decoder decode(AsyncStoreClient::Handler<T> done, Read read) {
  return [done = std::move(done), read = std::move(read)](const Failure* failure,
                                                          wire::Reader* reader) {
    if (failure != nullptr) return done(failure, T{});
    done(nullptr, read(*reader));
  };
}

Decoder decode_done(AsyncStoreClient::Handler<Done> done) {
  return decode(std::move(done), [](wire::Reader&) { return Done{}; });
}

}  // namespace

AsyncStoreClient::AsyncStoreClient(asio::io_context& io, ClientOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {}

AsyncStoreClient::~AsyncStoreClient() {
  if (impl_) impl_->close();
}

AsyncStoreClient::AsyncStoreClient(AsyncStoreClient&&) noexcept = default;
AsyncStoreClient& AsyncStoreClient::operator=(AsyncStoreClient&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->close();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

void AsyncStoreClient::connect(std::string host, std::uint16_t port, Handler<Done> done) {
  impl_->connect(std::move(host), port, std::move(done));
}

AsyncStoreClient::RequestId AsyncStoreClient::set(std::string_view key, std::string_view value,
                                                  Handler<Done> done) {
  auto request = make(wire::Op::Set, {key}, {value});
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::get(std::string_view key, Handler<std::string> done) {
  auto request = make(wire::Op::Get, {key});
  return impl_->send(
      request, decode(std::move(done), [](wire::Reader& r) { return std::string(r.bytes()); }));
}

AsyncStoreClient::RequestId AsyncStoreClient::try_get(std::string_view key,
                                                      Handler<std::optional<std::string>> done) {
  auto request = make(wire::Op::TryGet, {key});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       std::optional<std::string> value;
                       if (r.u8() != 0) value.emplace(r.bytes());
                       return value;
                     }));
}

AsyncStoreClient::RequestId AsyncStoreClient::add(std::string_view key, std::int64_t delta,
                                                  Handler<std::int64_t> done) {
  auto request = make(wire::Op::Add, {key});
  request.delta = delta;
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.i64(); }));
}

AsyncStoreClient::RequestId AsyncStoreClient::compare_set(std::string_view key,
                                                          std::string_view expected,
                                                          std::string_view desired,
                                                          Handler<CompareSetResult> done) {
  auto request = make(wire::Op::CompareSet, {key}, {expected, desired});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       CompareSetResult result;
                       result.swapped = r.u8() != 0;
                       const bool exists = r.u8() != 0;
                       const auto value = r.bytes();
                       if (exists) result.current.emplace(value);
                       return result;
                     }));
}

namespace {
wire::Request key_list(wire::Op op, std::span<const std::string> keys) {
  wire::Request request;
  request.op = op;
  request.keys.assign(keys.begin(), keys.end());
  return request;
}
}  // namespace

AsyncStoreClient::RequestId AsyncStoreClient::wait(std::span<const std::string> keys,
                                                   Handler<Done> done) {
  auto request = key_list(wire::Op::Wait, keys);
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::check(std::span<const std::string> keys,
                                                    Handler<bool> done) {
  auto request = key_list(wire::Op::Check, keys);
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.u8() != 0; }));
}

AsyncStoreClient::RequestId AsyncStoreClient::delete_key(std::string_view key, Handler<bool> done) {
  auto request = make(wire::Op::Delete, {key});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.u8() != 0; }));
}

AsyncStoreClient::RequestId AsyncStoreClient::count_keys(std::string_view prefix,
                                                         Handler<std::int64_t> done) {
  auto request = make(wire::Op::CountKeys, {prefix});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) { return r.i64(); }));
}

AsyncStoreClient::RequestId AsyncStoreClient::list_keys(
    std::string_view prefix, Handler<std::pair<std::vector<std::string>, bool>> done) {
  auto request = make(wire::Op::ListKeys, {prefix});
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       const bool truncated = r.u8() != 0;
                       const std::uint32_t n = r.u32();
                       std::vector<std::string> keys;
                       for (std::uint32_t i = 0; i < n && r.ok(); ++i)
                         keys.emplace_back(r.bytes());
                       return std::make_pair(std::move(keys), truncated);
                     }));
}

AsyncStoreClient::RequestId AsyncStoreClient::multi_get(std::span<const std::string> keys,
                                                        Handler<std::vector<std::string>> done) {
  auto request = key_list(wire::Op::MultiGet, keys);
  return impl_->send(request, decode(std::move(done), [](wire::Reader& r) {
                       const std::uint32_t n = r.u32();
                       std::vector<std::string> values;
                       for (std::uint32_t i = 0; i < n && r.ok(); ++i) {
                         values.emplace_back(r.bytes());
                       }
                       return values;
                     }));
}

AsyncStoreClient::RequestId AsyncStoreClient::multi_set(std::span<const std::string> keys,
                                                        std::span<const std::string> values,
                                                        Handler<Done> done) {
  if (keys.size() != values.size()) {
    throw ArgumentError(fmt::format("store multi_set: {} keys but {} values; they must pair up",
                                    keys.size(), values.size()));
  }
  auto request = key_list(wire::Op::MultiSet, keys);
  request.values.assign(values.begin(), values.end());
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::append(std::string_view key, std::string_view value,
                                                     Handler<Done> done) {
  auto request = make(wire::Op::Append, {key}, {value});
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::barrier(std::string_view name, std::uint32_t n,
                                                      Handler<Done> done) {
  auto request = make(wire::Op::Barrier, {name});
  request.number = n;
  return impl_->send(request, decode_done(std::move(done)));
}

AsyncStoreClient::RequestId AsyncStoreClient::ping(Handler<Done> done) {
  auto request = make(wire::Op::Ping);
  return impl_->send(request, decode_done(std::move(done)));
}

void AsyncStoreClient::abandon(RequestId id) {
  impl_->abandon(id);
}
void AsyncStoreClient::close() {
  impl_->close();
}
const std::string& AsyncStoreClient::address() const {
  return impl_->address();
}
const StoreLimits& AsyncStoreClient::limits() const {
  return impl_->limits();
}
const ClientOptions& AsyncStoreClient::options() const {
  return impl_->options();
}

}  // namespace collie::store
