// torch's TCPStore clients on a store connection (session.hpp,
// torch_dialect.hpp): their bytes in under the memory budget, each query
// turned into the store request that does the same on the same keys, its
// reply rewritten in torch's form. torch's protocol has no error replies: a
// query the store refuses (a limit, the memory budget, a counter that is
// not a number) closes the connection, and the log says why.
#include "session.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include <collie/duration.hpp>

#include "../peer_user.hpp"

namespace collie::store {

using asio::ip::tcp;

namespace {

// Loopback, also as an IPv4-mapped address (a dual-stack listener's view
// of 127.0.0.1).
bool is_loopback(const asio::ip::address& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    return asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6()).is_loopback();
  return a.is_loopback();
}

}  // namespace

std::optional<std::string> Session::torch_refusal() {
  if (refusal_) return "refused a torch TCPStore client: the server is at a connection limit";
  // torch cannot prove the token: on loopback, its client must at least
  // run as this server's user (who can read a rank's token anyway).
  std::error_code a, b;
  const auto local = socket_.local_endpoint(a);
  const auto remote = socket_.remote_endpoint(b);
  if (server_.options().torch_loopback_only && (a || b || !is_loopback(remote.address()))) {
    return "refused a torch TCPStore client from another host: torch's protocol cannot "
           "prove the job's token, so its clients are served on loopback only. " +
           server_.options().torch_refusal_hint;
  }
  if (server_.options().torch_same_user && !a && !b && is_loopback(remote.address())) {
    const auto uid = peer_user(local, remote);
    if (!uid || *uid != ::geteuid()) {
      return uid ? fmt::format("refused a torch TCPStore client: it runs as uid {}, "
                               "not as this store's user (uid {})",
                               *uid, ::geteuid())
                 : std::string("refused a torch TCPStore client: its user could not be "
                               "told from /proc/net/tcp");
    }
  }
  return std::nullopt;
}

void Session::start_torch() {
  if (auto refused = torch_refusal()) {
    return close(refusal_ ? spdlog::level::info : spdlog::level::warn, *refused);
  }
  server_.torch_callbacks().client_began(address_);
  phase_ = Phase::Torch;
  last_activity_ = Clock::now();
  torch_in_.push_back(hello_in_[0]);
  torch_account();
  std::error_code ignored;
  socket_.non_blocking(true, ignored);
  torch_process();
}

void Session::on_silent_handshake() {
  const auto waited = server_.options().handshake_timeout.count();
  if (auto refused = torch_refusal()) {
    return close(spdlog::level::debug,
                 fmt::format("it sent nothing for {} ms; as a torch client it would be {}", waited,
                             *refused));
  }
  if (!server_.torch_callbacks().keep(shared_from_this())) {
    return close(spdlog::level::debug,
                 fmt::format("it sent nothing for {} ms, and {} holds as many silent "
                             "connections as a torch client may need already (one per torch "
                             "client, two for one yet to send its first query)",
                             waited, address_));
  }
  phase_ = Phase::TorchQuiet;
  log().debug("store: {} sent nothing for {} ms: kept open as a torch client's silent "
              "connection (torch 1.x's second one, which closed makes torch's store thread "
              "spin, or a client yet to send its first query)",
              peer_, waited);
}

void Session::become_torch_tunnel(std::uint32_t id) {
  deliver(std::move(wire::begin_reply(wire::ReplyStatus::Ok, id)).finish());
  phase_ = Phase::Torch;
  server_.torch_callbacks().client_began(address_);
  // Bytes after the request are already the torch client's.
  const auto rest = in_.buffered_bytes();
  torch_in_.assign(rest.begin(), rest.end());
  in_.drop();
  in_.release();
  account_input();
  // As a torch client's own connection: no idle timeout (torch keeps one
  // idle for its callbacks).
  timer_.cancel();
  last_activity_ = Clock::now();
  torch_account();
  log().debug("store: {} carries a torch client's queries from now on (a relay's tunnel)", peer_);
  torch_process();
}

void Session::torch_read() {
  if (reading_ || phase_ != Phase::Torch) return;
  reading_ = true;
  wait_readable([self = shared_from_this()](std::error_code ec) {
    self->reading_ = false;
    if (self->phase_ != Phase::Torch) return;
    if (ec) return self->lost(ec);
    self->torch_receive();
  });
}

void Session::torch_receive() {
  std::array<std::uint8_t, 65536> chunk;
  std::error_code ec;
  const std::size_t n = read_bytes(chunk, ec);
  account_sealed();
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

void Session::torch_account() {
  const std::size_t hold = torch_in_.capacity();
  if (hold > torch_counted_) {
    server_.budget().take(hold - torch_counted_);
  } else {
    server_.budget().give(torch_counted_ - hold);
  }
  torch_counted_ = hold;
}

void Session::torch_process() {
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

void Session::torch_handle(const torch::Query& q) {
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
  auto t = torch::translate(q, ++torch_next_id_);
  if (t.kind == torch::Translation::Kind::Answer) return torch_send(std::move(t.answer));
  if (t.kind != torch::Translation::Kind::Request) return;
  if (auto error = wire::check_limits(t.request, server_.options().limits)) {
    return close(spdlog::level::warn,
                 fmt::format("refused a torch {} query: {}", torch::command_name(q.command),
                             *error));
  }
  torch_pending_[t.request.id] = TorchPending{
      q.command, q.command == torch::Command::CompareSet ? q.values[0] : std::string()};
  server_.state().handle(*this, t.request);
}

void Session::torch_reply(const std::vector<std::uint8_t>& frame) {
  const auto id = torch::reply_id(frame);
  if (!id) return;
  auto it = torch_pending_.find(*id);
  if (it == torch_pending_.end()) return;  // a wait it cancelled
  const TorchPending pending = std::move(it->second);
  torch_pending_.erase(it);
  auto rewrite = torch::rewrite_reply(frame, pending.command, pending.expected);
  switch (rewrite.kind) {
    case torch::Rewrite::Kind::Reply:
      return torch_send(std::move(rewrite.reply));
    case torch::Rewrite::Kind::NoReply:
      return;
    case torch::Rewrite::Kind::Failed:
      return close(spdlog::level::warn,
                   fmt::format("a torch {} query failed, and torch's protocol has no way to say "
                               "so: {}",
                               torch::command_name(pending.command), rewrite.error));
    case torch::Rewrite::Kind::Unreadable:
      break;
  }
  close(spdlog::level::err, "a reply it could not rewrite for torch");
}

void Session::torch_watch_stall(Clock::duration after) {
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
                            describe_duration(idle)));
  });
}

void Session::torch_send(std::vector<std::uint8_t> bytes) {
  server_.budget().take(bytes.size());
  out_.push(std::move(bytes));
  write();
}

}  // namespace collie::store
