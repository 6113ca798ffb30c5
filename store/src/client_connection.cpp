// A store client's connection (client_connection.hpp): connecting with
// retries, replacing an idle connection, and requests and replies.
#include "client_connection.hpp"

#include <algorithm>
#include <fcntl.h>

#include <asio/connect.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/duration.hpp>
#include <collie/log.hpp>

namespace collie::store {

using asio::ip::tcp;

namespace {

// An attempt to connect gets until the connect deadline, and at least this.
constexpr auto kMinAttemptTime = std::chrono::seconds(1);
// After a failed send, how long the read in flight has to find why.
constexpr auto kSendFailureGrace = std::chrono::seconds(2);

bool is_blocking(wire::Op op) {
  return op == wire::Op::Get || op == wire::Op::Wait || op == wire::Op::MultiGet ||
         op == wire::Op::Barrier;
}

}  // namespace

AsyncStoreClient::Impl::Impl(asio::io_context& io, ClientOptions options)
    : io_(io),
      options_(std::move(options)),
      socket_(io),
      resolver_(io),
      timer_(io),
      in_(limits_.max_message_bytes) {}

void AsyncStoreClient::Impl::connect(std::string host, std::uint16_t port, Handler<Done> done) {
  host_ = std::move(host);
  port_ = port;
  address_ = join_host_port(host_, port);
  on_connected_ = std::move(done);
  last_error_.clear();
  connect_started_ = Clock::now();
  connect_deadline_ = connect_started_ + options_.connect_timeout.value_or(options_.timeout);
  attempt();
}

AsyncStoreClient::RequestId AsyncStoreClient::Impl::send(wire::Request& request, Decoder decoder) {
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

void AsyncStoreClient::Impl::abandon(RequestId id) {
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

int AsyncStoreClient::Impl::duplicate_socket() {
  if (state_ != State::Ready || !socket_.is_open()) return -1;
  return ::fcntl(socket_.native_handle(), F_DUPFD_CLOEXEC, 0);
}

void AsyncStoreClient::Impl::close() {
  fail(fmt::format("the connection to the store at {} was closed by this client", address_));
}

std::string AsyncStoreClient::Impl::not_ready_reason() const {
  if (state_ == State::Broken) return broken_reason_;
  return fmt::format("the client of the store at {} is not connected yet", address_);
}

void AsyncStoreClient::Impl::fail_later(Decoder decoder, Failure failure) {
  asio::post(io_, [decoder = std::move(decoder), failure = std::move(failure)] {
    decoder(&failure, nullptr);
  });
}

void AsyncStoreClient::Impl::attempt() {
  state_ = State::Connecting;
  ++attempts_;
  // An attempt that neither connects nor fails (a host gone from the
  // network drops its packets) ends at the deadline (and gets a second at
  // least): its handler retries, and past the deadline that fails.
  timer_.expires_at(std::max(connect_deadline_, Clock::now() + kMinAttemptTime));
  timer_.async_wait([self = shared_from_this(), attempt = attempts_](std::error_code ec) {
    if (ec || self->state_ != State::Connecting || self->attempts_ != attempt) return;
    std::error_code ignored;
    self->resolver_.cancel();
    self->socket_.close(ignored);
  });
  resolver_.async_resolve(
      host_, std::to_string(port_),
      [self = shared_from_this()](std::error_code ec, tcp::resolver::results_type results) {
        if (self->state_ != State::Connecting) return;
        if (ec)
          return self->retry(fmt::format("cannot resolve '{}': {}", self->host_, ec.message()));
        asio::async_connect(self->socket_, results,
                            [self](std::error_code ec2, const tcp::endpoint&) {
                              if (self->state_ != State::Connecting) return;
                              if (ec2 == asio::error::operation_aborted)
                                return self->retry(self->last_error_.empty()
                                                       ? std::string("no answer by the deadline")
                                                       : self->last_error_);
                              if (ec2) return self->retry(ec2.message());
                              self->start_handshake();
                            });
      });
}

void AsyncStoreClient::Impl::retry(const std::string& error) {
  last_error_ = error;
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

void AsyncStoreClient::Impl::connect_failed(Failure failure) {
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

void AsyncStoreClient::Impl::reconnect() {
  log().debug("store client: reconnecting to {} (the connection was idle)", address_);
  ++generation_;
  std::error_code ignored;
  socket_.close(ignored);
  socket_ = tcp::socket(io_);
  out_.clear();
  in_ = wire::FrameBuffer(limits_.max_message_bytes);
  reconnecting_ = true;
  send_error_.clear();
  attempts_ = 0;
  last_error_.clear();
  backoff_ = std::chrono::duration<double, std::milli>(10.0);
  connect_started_ = Clock::now();
  connect_deadline_ = connect_started_ + options_.connect_timeout.value_or(options_.timeout);
  attempt();
}

void AsyncStoreClient::Impl::ready() {
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

void AsyncStoreClient::Impl::enqueue(std::vector<std::uint8_t> frame) {
  out_.push(std::move(frame));
  write();
}

void AsyncStoreClient::Impl::write() {
  if (!send_error_.empty()) return;
  auto buffers = out_.start();
  if (buffers.empty()) return;
  auto written = [self = shared_from_this(), generation = generation_](std::error_code ec,
                                                                       std::size_t) {
    if (generation != self->generation_) return;  // a connection replaced since
    self->out_.finish();
    self->last_io_ = Clock::now();
    if (ec) return self->send_failed(ec);
    self->write();
  };
  if (sealed_) {
    // Frames a failure or a reconnection freed are never sealed.
    auto alive = [self = shared_from_this(), generation = generation_] {
      return generation == self->generation_ && self->state_ == State::Ready;
    };
    return async_write_sealed(socket_, *sealed_, std::move(buffers), std::move(written),
                              std::move(alive));
  }
  asio::async_write(socket_, buffers, std::move(written));
}

void AsyncStoreClient::Impl::send_failed(std::error_code ec) {
  send_error_ = fmt::format("lost the connection to the store at {} while sending: {}", address_,
                            ec.message());
  if (state_ != State::Ready) return fail(send_error_);
  // A store that refuses what it reads (a changed record, a request over
  // its limits) says why and closes, while this client may still be
  // sending: its reason is in the socket's receive queue, ahead of the end
  // of the stream, and the read in flight finds it (dispatch() then fails
  // with it). A socket that broke without a word ends that read too; the
  // timer only bounds the wait should neither come.
  timer_.expires_after(kSendFailureGrace);
  timer_.async_wait([self = shared_from_this(), generation = generation_](std::error_code e) {
    if (e || generation != self->generation_) return;
    self->fail(self->send_error_);
  });
}

void AsyncStoreClient::Impl::read() {
  if (sealed_) return read_sealed();
  const auto space = in_.prepare();
  socket_.async_read_some(
      asio::buffer(space.data(), space.size()),
      [self = shared_from_this(), generation = generation_](std::error_code ec, std::size_t n) {
        if (self->state_ != State::Ready || generation != self->generation_) return;
        self->last_io_ = Clock::now();
        if (ec) return self->read_failed(ec);
        self->in_.commit(n);
        if (self->dispatch()) self->read();
      });
}

void AsyncStoreClient::Impl::read_sealed() {
  auto readable = [self = shared_from_this(), generation = generation_](std::error_code ec) {
    if (self->state_ != State::Ready || generation != self->generation_) return;
    if (ec) return self->read_failed(ec);
    const auto space = self->in_.prepare();
    const std::size_t n =
        self->sealed_->read_some(self->socket_.native_handle(), space, ec);
    if (ec == asio::error::would_block) return self->read_sealed();
    self->last_io_ = Clock::now();
    if (ec) return self->read_failed(ec);
    self->in_.commit(n);
    if (self->dispatch()) self->read();
  };
  if (sealed_->has_unread()) {
    asio::post(io_, [readable = std::move(readable)] { readable(std::error_code()); });
  } else {
    socket_.async_wait(asio::ip::tcp::socket::wait_read, std::move(readable));
  }
}

void AsyncStoreClient::Impl::read_failed(std::error_code ec) {
  if (sealed_ && ec == std::errc::bad_message) {
    return fail(fmt::format("the sealed stream from the store at {} broke on its way: {}",
                            address_, sealed_->failure()),
                Failure::Kind::Protocol);
  }
  if (!send_error_.empty()) return fail(send_error_);
  fail(ec == asio::error::eof
           ? fmt::format("the store at {} closed the connection", address_)
           : fmt::format("lost the connection to the store at {}: {}", address_, ec.message()));
}

bool AsyncStoreClient::Impl::dispatch() {
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

void AsyncStoreClient::Impl::rest() {
  log().debug("store client: the store at {} closed the idle connection", address_);
  state_ = State::Resting;
  ++generation_;
  std::error_code ignored;
  socket_.close(ignored);
  out_.clear();
}

void AsyncStoreClient::Impl::fail(std::string reason, Failure::Kind kind) {
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

}  // namespace collie::store
