// The connection table: finishing requests and failing peers, under its
// lock (connections.hpp).
#include "connections.hpp"

#include <fmt/format.h>

#include <collie/transport/interfaces.hpp>

namespace collie::transport::tcp {

Connections::Connections(const TransportOptions& options)
    : opt(options), pool(options.max_unexpected_bytes) {
  streams.store(options.settings.streams > 0 ? options.settings.streams : 1);
  peers.reserve(static_cast<std::size_t>(options.world_size));
  for (int r = 0; r < options.world_size; ++r)
    peers.emplace_back(*this, r);
  peer(options.rank).state = PeerState::Ready;  // itself, no socket
}

void Connections::complete(TcpRequest& r) {
  r.state.store(static_cast<int>(State::Done), std::memory_order_release);
  --pending;
  last_done.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                  std::memory_order_relaxed);
  done_cv.notify_all();
}

void Connections::fail(TcpRequest& r, ErrorKind kind, std::string message) {
  if (r.state.load(std::memory_order_relaxed) != static_cast<int>(State::Pending)) return;
  r.error_kind = kind;
  r.error = std::move(message);
  r.state.store(static_cast<int>(State::Failed), std::memory_order_release);
  --pending;
  done_cv.notify_all();
}

void Connections::fail_for_peer(TcpRequest& r, ErrorKind kind, const std::string& reason) {
  fail(r, kind, fmt::format("{} failed: {} ({})", describe_request(r), reason, progress_text(r)));
}

void Connections::fail_size_mismatch(TcpRequest& r, std::size_t sent, std::uint64_t fingerprint) {
  r.fingerprint = fingerprint;
  fail(r, ErrorKind::Request,
       size_mismatch_text(describe_request(r), describe_peer(r.peer()), sent, r.bytes));
}

void Connections::resume_paused() {
  if (paused_peers == 0) return;  // the common case: nothing to scan
  for (int rank : connected) {
    auto& p = peer(rank);
    if (p.state == PeerState::Ready && p.rx == Rx::Paused && p.resume()) {
      p.receive();
      wake_pollers();
    }
  }
}

void Connections::install(PeerStream& p, Descriptor connection,
                          std::unique_ptr<SealedState> seal) {
  p.open(std::move(connection), std::move(seal));
  p.posted.prime();
  p.unexpected.prime();
  connected.push_back(p.rank);
  state_cv.notify_all();
  wake_pollers();
}

void Connections::stop_waiting() {
  // The background thread moves data while nobody waits.
  if (--waiters == 0 && pending.load() > 0) nudge_background();
}

void Connections::wake_pollers(bool urgent) {
  if (waiters.load() > 0)
    driver_wake.kick();
  else if (urgent)
    wake_background();
  else
    nudge_background();
}

void Connections::wake_background() {
  background_urgent.store(true);
  background_wake.kick();
}

void Connections::nudge_background() {
  const auto quiet =
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(kQuiet).count();
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  const auto quiet_from = last_done.load(std::memory_order_relaxed) + quiet;
  if (now >= quiet_from) {
    wake_background();  // the callers are quiet: nobody else will move it
    return;
  }
  // Awake (0), the thread is deciding and sees this change: it publishes
  // its deadline, then looks at `waiters` again (progress.cpp). Asleep
  // until about when the callers go quiet, it looks again by itself then.
  const auto until = background_until.load();
  if (until == 0 || until <= quiet_from + quiet) return;
  background_wake.kick();
}

std::string Connections::describe_peer(int rank) const {
  if (rank == opt.rank) return fmt::format("rank {} (itself)", rank);
  const auto& p = peers[static_cast<std::size_t>(rank)];
  const auto where = p.published.empty() ? p.address : published_primary(p.published);
  if (where.empty()) return fmt::format("rank {}", rank);
  return fmt::format("rank {} at {}", rank, where);
}

std::string Connections::describe_request(const TcpRequest& r) const {
  return request_text(opt.rank, r, describe_peer(r.peer()));
}

std::string Connections::progress_text(const TcpRequest& r) const {
  return transport::progress_text(r);
}

}  // namespace collie::transport::tcp
