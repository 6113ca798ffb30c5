// A store client's connection after its handshake (session.hpp): frames
// in, requests handed to the store's state, replies out; back-pressure and
// the memory budget; idle and stalled connections; closing.
#include "session.hpp"

#include <algorithm>
#include <utility>

#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/duration.hpp>

namespace collie::store {

using asio::ip::tcp;

Session::Session(ServerCore& server, tcp::socket socket, std::string address,
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

void Session::start() {
  arm_handshake_timer();
  // One byte first: collie's hello, or (with torch_clients) a torch query.
  asio::async_read(socket_, asio::buffer(hello_in_.data(), 1),
                   [self = shared_from_this()](std::error_code ec, std::size_t) {
                     if (ec) return self->lost(ec);
                     self->on_first_byte();
                   });
}

void Session::arm_handshake_timer() {
  handshake_timer_.expires_after(server_.options().handshake_timeout);
  handshake_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    // A wait that had expired when the timer was cancelled still runs, with
    // no error: the first byte and the expiry can complete in one turn of
    // the I/O loop, the byte's handler first (a torch client's query found
    // past the handshake time). (It is armed again only after its wait ran:
    // a kept silent connection that speaks.)
    if (ec || !self->in_handshake()) return;
    // torch 1.x opens a second connection per client and leaves it
    // silent unless it watches a key: kept, or closed without a warning.
    if (!self->first_byte_ && self->server_.options().torch_clients) {
      return self->on_silent_handshake();
    }
    self->close(spdlog::level::warn,
                fmt::format("no complete handshake within {} ms",
                            self->server_.options().handshake_timeout.count()));
  });
}

void Session::deliver(std::vector<std::uint8_t> frame) {
  if (phase_ == Phase::Closed) return;
  if (phase_ == Phase::Torch) return torch_reply(frame);
  server_.budget().take(frame.size());
  out_.push(std::move(frame));
  write();
}

void Session::deliver_pieces(std::vector<Piece> pieces) {
  if (phase_ == Phase::Closed) return;
  if (phase_ == Phase::Torch) return ReplyTarget::deliver_pieces(std::move(pieces));
  for (auto& piece : pieces) {
    server_.budget().take(piece.owned_size());
    out_.push(std::move(piece));
  }
  write();
}

void Session::close(spdlog::level::level_enum level, std::string_view reason) {
  if (phase_ == Phase::Closed) return;
  const bool was_ready = phase_ == Phase::Ready || phase_ == Phase::Torch;
  const bool was_torch = phase_ == Phase::Torch;
  const bool was_quiet = phase_ == Phase::TorchQuiet;
  phase_ = Phase::Closed;
  if (level >= spdlog::level::info) {
    server_.address_log().log(
        level, address_, fmt::format("store: closed the connection from {}: {}", peer_, reason));
  } else {
    log().log(level, "store: closed the connection from {}: {}", peer_, reason);
  }
  if (was_ready) server_.state().forget(*this);
  if (was_torch) server_.torch_callbacks().client_left(address_);
  if (was_quiet) server_.torch_callbacks().quiet_ended(address_);
  std::error_code ignored;
  handshake_timer_.cancel();
  timer_.cancel();
  socket_.close(ignored);
  server_.budget().give(out_.clear());
  in_.drop();
  in_.release();
  account_input();
  // The channel lives while a write may still use it; its bytes are no
  // longer this connection's to count.
  server_.budget().give(std::exchange(sealed_counted_, 0));
  server_.budget().give(torch_counted_);
  torch_counted_ = 0;
  torch_in_ = {};
  server_.maybe_trim();
  server_.remove(shared_from_this());  // may be the last reference: nothing after this
}

void Session::lost(std::error_code ec) {
  if (phase_ == Phase::Closed) return;
  if (phase_ == Phase::Proof) {
    return close(spdlog::level::warn,
                 fmt::format("refused: it closed the connection during authentication ({}); "
                             "it may have rejected this server's token",
                             ec.message()));
  }
  if (sealed_ && ec == std::errc::bad_message) {
    // Changed on its way: the client is told (sealed, the other direction
    // is whole), and the connection closed.
    const auto reason = "the client's sealed stream broke on its way to the store: " +
                        sealed_->failure();
    if (phase_ == Phase::Ready) return refuse(0, reason);
    return close(spdlog::level::warn, reason);
  }
  close(phase_ == Phase::Ready ? spdlog::level::debug : spdlog::level::info,
        ec == asio::error::eof ? std::string("the client disconnected") : ec.message());
}

void Session::arm_idle_timer(Clock::duration after) {
  if (server_.options().idle_timeout <= std::chrono::milliseconds::zero()) return;
  arm_timer(after);
}

void Session::arm_timer(Clock::duration after) {
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (!ec) self->on_idle_timer();
  });
}

void Session::on_idle_timer() {
  stall_armed_ = false;
  if (phase_ != Phase::Ready || close_after_write_) return;
  const auto idle = Clock::now() - last_activity_;
  if (request_under_way() || skip_ > 0) {
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
    if (taking_requests() && ((sealed_ && sealed_->has_unread()) ||
                              (socket_.available(ec) > 0 && !ec))) {
      stall_armed_ = true;
      return arm_timer(stall);
    }
    return close(
        spdlog::level::warn,
        fmt::format("it sent part of a request, then nothing for {}", describe_duration(idle)));
  }
  const auto limit = server_.options().idle_timeout;
  if (limit <= std::chrono::milliseconds::zero()) return;
  if (idle < limit || server_.state().has_parked(*this)) {
    return arm_idle_timer(idle < limit ? limit - idle : Clock::duration(limit));
  }
  const auto text = fmt::format(
      "the store closed this connection after {} without a request "
      "(its idle timeout); nothing was lost",
      describe_duration(idle));
  if (!out_.empty()) {
    // Its client reads nothing either: no point in saying goodbye.
    return close(
        spdlog::level::info,
        fmt::format("idle for {}, and its client does not read its replies", describe_duration(idle)));
  }
  deliver(wire::error_reply(0, wire::ErrorCode::Idle, text));
  close_after_write_ = true;
  close_reason_ = fmt::format("idle for {} (the server's idle timeout)", describe_duration(idle));
  close_level_ = spdlog::level::debug;
}

void Session::read() {
  reading_ = true;
  wait_readable([self = shared_from_this()](std::error_code ec) {
    self->reading_ = false;
    if (self->phase_ == Phase::Closed) return;
    if (ec) return self->lost(ec);
    self->receive();
  });
}

void Session::wait_readable(std::function<void(std::error_code)> then) {
  if (sealed_ && sealed_->has_unread()) {
    asio::post(socket_.get_executor(), [then = std::move(then)] { then(std::error_code()); });
    return;
  }
  socket_.async_wait(tcp::socket::wait_read, std::move(then));
}

std::size_t Session::read_bytes(std::span<std::uint8_t> into, std::error_code& ec) {
  if (sealed_) return sealed_->read_some(socket_.native_handle(), into, ec);
  return socket_.read_some(asio::buffer(into.data(), into.size()), ec);
}

void Session::receive() {
  std::error_code ec;
  std::size_t n = 0;
  if (skip_ > 0) {
    // The rest of a refused frame: read and dropped.
    std::array<std::uint8_t, 16384> scratch;
    n = read_bytes(std::span(scratch.data(), std::min<std::size_t>(scratch.size(), skip_)), ec);
    if (!ec) skip_ -= n;
  } else {
    const auto space = in_.prepare();
    n = read_bytes(std::span(space.data(), space.size()), ec);
    if (!ec) in_.commit(n);
  }
  if (ec == asio::error::would_block || ec == asio::error::try_again) {
    account_input();
    watch_stall();  // part of a sealed record: no plaintext yet, but under way
    return read();
  }
  if (ec) return lost(ec);
  last_activity_ = Clock::now();
  account_input();
  process();
}

bool Session::request_under_way() const {
  return in_.buffered() > 0 || (sealed_ && sealed_->holds_part());
}

void Session::watch_stall() {
  // A request under way must keep coming (see on_idle_timer).
  if (!request_under_way() || stall_armed_) return;
  stall_armed_ = true;
  arm_timer(server_.options().handshake_timeout);
}

bool Session::taking_requests() const {
  if (phase_ != Phase::Ready || close_after_write_) return false;
  // Replies pile up: its client sends without reading. Wait for it.
  if (out_.bytes() > std::max<std::size_t>(server_.options().limits.max_message_bytes, 1 << 20))
    return false;
  if (out_.owned_bytes() > kOwnedBacklog) return false;
  // Short of memory: only connections whose replies are all sent go on.
  if (server_.budget().over() && !out_.empty()) return false;
  return true;
}

void Session::process() {
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
        if (parsed.request.op == wire::Op::Torch) return become_torch_tunnel(parsed.request.id);
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
  if (in_.buffered() == 0) in_.release();
  watch_stall();
  account_input();
  server_.maybe_trim();
  if (phase_ == Phase::Ready && !close_after_write_ && !reading_ &&
      (skip_ > 0 || taking_requests())) {
    read();
  }
}

bool Session::admit_frame() {
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

void Session::account_input() {
  account_sealed();
  std::size_t hold = in_.capacity();
  if (in_counted_ > hold && in_.buffered() > 0) hold = in_counted_;  // an admitted frame
  if (hold > in_counted_) {
    server_.budget().take(hold - in_counted_);
  } else {
    server_.budget().give(in_counted_ - hold);
  }
  in_counted_ = hold;
}

void Session::account_sealed() {
  const std::size_t hold = sealed_ ? sealed_->held() : 0;
  if (hold > sealed_counted_) {
    server_.budget().take(hold - sealed_counted_);
  } else {
    server_.budget().give(sealed_counted_ - hold);
  }
  sealed_counted_ = hold;
}

void Session::refuse(std::uint32_t id, std::string reason) {
  deliver(wire::error_reply(id, wire::ErrorCode::Malformed, reason));
  close_after_write_ = true;
  close_reason_ = std::move(reason);
}

void Session::write() {
  auto buffers = out_.start();
  if (buffers.empty()) return;
  auto written = [self = shared_from_this()](std::error_code ec, std::size_t) {
    if (self->phase_ == Phase::Closed) return;
    self->server_.budget().give(self->out_.finish());
    self->account_sealed();
    if (ec) return self->lost(ec);
    self->last_activity_ = Clock::now();
    if (!self->out_.empty()) return self->write();
    if (self->close_after_write_) {
      return self->close(self->close_level_, self->close_reason_);
    }
    if (self->seal_when_written_) {
      // The status went out clear; all that follows, both ways, is sealed.
      self->seal_when_written_ = false;
      self->sealed_ = std::make_unique<SealedChannel>(self->keys_.acceptor_to_connector,
                                                      self->keys_.connector_to_acceptor);
      self->keys_ = {};  // the channel holds what it needs; no copy outlives the handshake
      return self->become_ready();
    }
    // Replies drained: resume a paused reader.
    if (self->phase_ == Phase::Ready) self->process();
    if (self->phase_ == Phase::Torch) self->torch_process();
  };
  if (sealed_) {
    // Once close() has freed the frames, no batch of them is sealed.
    async_write_sealed(socket_, *sealed_, std::move(buffers), std::move(written),
                       [self = shared_from_this()] { return self->phase_ != Phase::Closed; });
    return account_sealed();  // the first batch's records
  }
  asio::async_write(socket_, buffers, std::move(written));
}

}  // namespace collie::store
