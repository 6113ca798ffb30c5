// The TCP transport's face: the Transport calls, the connection of a peer
// on first use, waits with timeouts, and orderly shutdown. The pieces it
// ties together: the connection table and each peer's stream
// (connections.hpp, peer_stream.hpp), the listener and connector
// (handshakes), and the progress loops.
#include <algorithm>
#include <cerrno>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/certificates.hpp>
#include <collie/deadline.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include <collie/log.hpp>
#include <collie/transport/interfaces.hpp>
#include <collie/transport/keys.hpp>
#include <collie/transport/tcp.hpp>

#include "../block_pool.hpp"
#include "connections.hpp"
#include "connector.hpp"
#include "lane_keeper.hpp"
#include "listener.hpp"
#include "progress.hpp"

namespace collie::transport {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace tcp;

struct TcpTransport::Impl {
  Impl(std::shared_ptr<store::Store> s, TransportOptions o)
      : options(std::move(o)),
        store(std::move(s)),
        table(options),
        listener(options, io, table),
        progress(table, listener),
        keeper(table, [this](int peer, Attempt& a) {
          return find_address(peer, Clock::now() + options.timeout, a);
        }) {
    table.lanes_lost = [this] { keeper.wake(); };
  }

  TransportOptions options;
  std::shared_ptr<store::Store> store;
  asio::io_context io;  // the listener's sockets are its; never run (progress.hpp polls them)
  Connections table;
  Listener listener;
  Progress progress;
  LaneKeeper keeper;  // opens lost lanes again
  std::thread background;

  std::string key(int rank) const { return keys::tcp_address(options.group, rank); }

  TcpRequest& of(const RequestPtr& r) const { return static_cast<TcpRequest&>(*r); }

  // The peer's published address: known, or looked up in the store ("" and
  // `a` filled when that fails).
  std::string find_address(int peer, Clock::time_point deadline, Attempt& a) {
    {
      std::lock_guard lock(table.mu);
      if (const auto& known = table.peer(peer).published; !known.empty()) return known;
    }
    std::string where;
    try {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      where = store->get(key(peer), std::max(left, 1ms));
    } catch (const TimeoutError&) {
      a.kind = ErrorKind::Timeout;
      a.error = fmt::format(
          "rank {} never published its address (store key '{}') within {}: did it start and "
          "join the group?",
          peer, key(peer), describe_duration(options.timeout));
      return "";
    } catch (const Error& e) {
      a.error = fmt::format("could not look up rank {}'s address in the store: {}", peer, e.what());
      return "";
    }
    std::lock_guard lock(table.mu);
    table.peer(peer).published = where;
    return where;
  }

  // Makes sure the peer is Ready or Failed (caller's thread, mu not held).
  void ensure_connected(int peer) {
    std::unique_lock lock(table.mu);
    auto& p = table.peer(peer);
    const auto deadline = Clock::now() + options.timeout;
    while (p.state == PeerState::Connecting) {
      if (!table.state_cv.wait_until(lock, deadline,
                                     [&] { return p.state != PeerState::Connecting; })) {
        p.fail(ErrorKind::Timeout,
               fmt::format("no connection to {} within {}", table.describe_peer(peer),
                           describe_duration(options.timeout)));
      }
    }
    if (p.state != PeerState::Unconnected) return;
    p.state = PeerState::Connecting;
    lock.unlock();
    Attempt a;
    if (const auto where = find_address(peer, deadline, a); !where.empty())
      a = connect_to_peer(options, peer, published_primary(where), deadline,
                          table.avoid_pacing.load(std::memory_order_relaxed));
    lock.lock();
    if (!a.error.empty()) {
      if (p.state == PeerState::Connecting) p.fail(a.kind, a.error);
      return;
    }
    if (a.verdict == wire::Verdict::Accepted && p.state == PeerState::Connecting) {
      table.install(p, std::move(a.connection), std::move(a.seal));
      collie::log().debug("rank {}: connected to {}", options.rank, table.describe_peer(peer));
      return;
    }
    a.connection = Descriptor();  // the peer's own connection to us is the one kept
    if (!table.state_cv.wait_until(lock, deadline,
                                   [&] { return p.state != PeerState::Connecting; })) {
      p.fail(ErrorKind::Timeout,
             fmt::format("{} said it was connecting to this rank, but no connection came "
                         "within {}",
                         table.describe_peer(peer), describe_duration(options.timeout)));
    }
  }

  // Opens this rank's sending lanes to a Ready peer (connector.hpp).
  void open_lanes(int peer) {
    tcp::open_lanes(table, peer, [&](Attempt& a) {
      return find_address(peer, Clock::now() + options.timeout, a);
    });
  }

  RequestPtr post_recv(int peer, Tag tag, std::byte* data, std::size_t bytes, Consumer consume) {
    check_peer(options.rank, options.world_size, peer,
               consume ? "irecv_consume from" : "recv from");
    auto r = make_pooled<TcpRequest>(peer, false, tag, data, bytes, 0);
    r->consume = std::move(consume);
    bool connect = false;
    {
      std::lock_guard lock(table.mu);
      table.started();
      auto& p = table.peer(peer);
      p.post_recv(r);
      connect = p.state == PeerState::Unconnected;
    }
    // Connecting now, not at the first send, means a peer that dies before
    // sending is noticed at once.
    if (connect) ensure_connected(peer);
    return r;
  }

  // A wait ran out of time: the request fails with TimeoutError; one that
  // was half-way through a message fails its peer (mu held).
  // Gives up on a pending request: its wait timed out, or (signal != 0)
  // was interrupted (interrupt.hpp).
  void time_out(const RequestPtr& request, std::chrono::milliseconds limit, int signal = 0) {
    auto& r = of(request);
    auto& p = table.peer(r.peer());
    // A caller that waited in slices (the executor) makes its last wait
    // with no time left: it says itself how long it waited in all.
    std::string why =
        timeout_text(table.describe_request(r), table.progress_text(r), limit, signal);
    if (p.state == PeerState::Connecting) why += "; the connection is still being set up";
    if (!r.is_send && p.rx == Rx::Paused)
      why += paused_text(table.describe_peer(r.peer()), table.pool.held(), table.pool.limit());
    const bool untouched = p.withdraw(std::static_pointer_cast<TcpRequest>(request));
    table.fail(r, ErrorKind::Timeout, why);
    if (!untouched) {  // a send half-way (a receive's rest is dropped)
      p.fail(ErrorKind::Connection,
             fmt::format("the connection to {} was closed after a send timed out half-way "
                         "through a message",
                         table.describe_peer(r.peer())));
    }
  }
};

std::shared_ptr<const seal::Certificates> load_certificates(const TransportSettings& t) {
  return seal::Certificates::from_settings(t.seal_cert, t.seal_key, t.seal_ca);
}

TcpTransport::TcpTransport(std::shared_ptr<store::Store> store, TransportOptions options) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw Error(fmt::format("transport: rank {} is outside a world of size {}", options.rank,
                            options.world_size));
  }
  if (!options.certificates) options.certificates = load_certificates(options.settings);
  impl_ = std::make_unique<Impl>(std::move(store), std::move(options));
  auto& m = *impl_;
  const int rank = m.options.rank;
  m.table.peer(rank).published = m.listener.published();
  m.background = std::thread([&m] { m.progress.background_loop(); });
  try {
    m.store->set(m.key(rank), m.listener.published());
  } catch (...) {
    m.progress.stop();
    m.background.join();
    throw;
  }
  collie::log().debug("rank {} listens on {}", rank, m.listener.published());
}

TcpTransport::~TcpTransport() {
  auto& m = *impl_;
  m.progress.stop();
  m.background.join();
  std::lock_guard drive(m.progress.drive_mu);
  std::lock_guard lock(m.table.mu);
  if (collie::log().should_log(spdlog::level::debug))
    for (const auto& p : m.table.peers)
      if (!p.out_lanes.empty())
        collie::log().debug("rank {}: lanes to {}: {}", rank(), m.table.describe_peer(p.rank),
                            p.lanes_report());
  for (auto& p : m.table.peers) {
    const std::string reason = "the transport was shut down on this rank";
    for (auto& r : p.sends)
      m.table.fail_for_peer(*r, ErrorKind::Connection, reason);
    p.posted.drain(
        [&](const TcpRequestPtr& r) { m.table.fail_for_peer(*r, ErrorKind::Connection, reason); });
    if (p.current_recv) m.table.fail_for_peer(*p.current_recv, ErrorKind::Connection, reason);
    if (p.striped_handover)
      m.table.fail_for_peer(*p.striped_handover, ErrorKind::Connection, reason);
    if (p.connection.valid()) ::shutdown(p.fd(), SHUT_WR);
    for (auto& lane : p.out_lanes) {
      lane->request = nullptr;
      if (lane->connection.valid()) ::shutdown(lane->fd(), SHUT_WR);
    }
  }
  // A lingering close: closing a socket with unread data in it sends a reset,
  // and a reset makes the peer's kernel drop what it had not yet read of
  // ours (the last message before an error, say). So read and discard until
  // each peer closes its side too (it does as soon as it sees ours), for at
  // most a quarter of a second, then close.
  std::vector<pollfd> open;
  for (auto& p : m.table.peers) {
    if (p.connection.valid()) open.push_back({p.fd(), POLLIN, 0});
    for (auto* lanes : {&p.out_lanes, &p.in_lanes})
      for (auto& lane : *lanes)
        if (lane->connection.valid()) open.push_back({lane->fd(), POLLIN, 0});
  }
  const auto linger_until = Clock::now() + 250ms;
  while (!open.empty() && Clock::now() < linger_until) {
    if (::poll(open.data(), open.size(), std::max(poll_ms_until(linger_until), 1)) < 0 &&
        errno != EINTR)
      break;
    std::erase_if(open, [](const pollfd& f) {
      if (f.revents == 0) return false;
      std::array<std::byte, 64 * 1024> sink;
      const auto n = ::read(f.fd, sink.data(), sink.size());
      return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    });
  }
  m.listener.close_all();
  for (auto& p : m.table.peers) {
    p.connection = Descriptor();
    p.out_lanes.clear();
    p.in_lanes.clear();
  }
}

int TcpTransport::rank() const {
  return impl_->options.rank;
}

int TcpTransport::world_size() const {
  return impl_->options.world_size;
}

const TransportOptions& TcpTransport::options() const {
  return impl_->options;
}

RequestPtr TcpTransport::isend(int peer, Tag tag, const void* data, std::size_t bytes,
                               std::uint64_t fingerprint) {
  auto& m = *impl_;
  check_peer(m.options.rank, m.options.world_size, peer, "send to");
  auto r = make_pooled<TcpRequest>(peer, true, tag,
                                        const_cast<std::byte*>(static_cast<const std::byte*>(data)),
                                        bytes, fingerprint);
  if (peer == m.options.rank) {
    std::lock_guard lock(m.table.mu);
    m.table.started();
    m.table.peer(peer).send_to_self(*r);
    return r;
  }
  std::unique_lock lock(m.table.mu);
  auto& p = m.table.peer(peer);
  if (p.state == PeerState::Unconnected || p.state == PeerState::Connecting) {
    lock.unlock();  // connecting blocks; only the first message to a peer pays it
    m.ensure_connected(peer);
    lock.lock();
  }
  m.table.started();
  if (p.state != PeerState::Ready) {
    m.table.fail_for_peer(*r, p.failure_kind, p.failure);
    return r;
  }
  // A poller asleep must add this socket's POLLOUT: only when the queue was
  // empty (otherwise it is in the poll set already). No system call per
  // send while a collective posts many; none either while the caller's
  // own waits keep moving the data (nudge_background).
  if (bytes >= kStripeFrom && !p.lanes_final &&
      (p.lanes == LanesState::None || p.lanes == LanesState::Open) &&
      static_cast<int>(p.out_lanes.size()) < m.table.streams.load(std::memory_order_relaxed) &&
      m.table.streams.load(std::memory_order_relaxed) > 1) {
    lock.unlock();  // once per peer, at its first large message
    m.open_lanes(peer);
    lock.lock();
    if (p.state != PeerState::Ready) {
      m.table.fail_for_peer(*r, p.failure_kind, p.failure);
      return r;
    }
  }
  const bool first = p.sends.empty();
  p.post_send(r);
  if (first && r->pending()) m.table.wake_pollers(/*urgent=*/false);
  return r;
}

RequestPtr TcpTransport::irecv(int peer, Tag tag, void* data, std::size_t bytes) {
  return impl_->post_recv(peer, tag, static_cast<std::byte*>(data), bytes, {});
}

RequestPtr TcpTransport::irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) {
  if (!consume) {
    throw ArgumentError(
        fmt::format("rank {}: irecv_consume from rank {} (tag {}, {} bytes): the "
                    "consumer is empty",
                    rank(), peer, tag, bytes));
  }
  return impl_->post_recv(peer, tag, nullptr, bytes, std::move(consume));
}

bool TcpTransport::wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) {
  if (!impl_->progress.drive_until(impl_->of(request), Clock::now() + timeout)) return false;
  wait(request, 0ms);  // done: throws its error, if any
  return true;
}

int TcpTransport::wait_any(std::span<const RequestPtr> requests,
                           std::chrono::milliseconds timeout) {
  int found = -1;
  impl_->progress.drive_until_any([&] { return (found = first_finished(requests)) >= 0; },
                                  Clock::now() + timeout);
  return found;
}

void TcpTransport::wait(const RequestPtr& request,
                        std::optional<std::chrono::milliseconds> timeout) {
  auto& m = *impl_;
  auto& r = m.of(request);
  const auto limit = timeout.value_or(m.options.timeout);
  bool interrupted = false;
  if (r.pending()) {
    m.progress.drive_until(r, Clock::now() + limit);
    if (r.pending()) {
      const int signal = waits_interrupted();
      std::lock_guard lock(m.table.mu);
      if (r.pending()) {
        m.time_out(request, limit, signal);
        interrupted = signal != 0;
      }
    }
  }
  if (r.state.load(std::memory_order_acquire) == static_cast<int>(State::Failed))
    throw_failure(r.error_kind, r.error, interrupted);
}

bool TcpTransport::test(const RequestPtr& request) const {
  return !impl_->of(request).pending();
}

std::uint64_t TcpTransport::fingerprint(const RequestPtr& request) const {
  // Written under the lock before the request finished: once it has, the
  // acquire in test() is enough (the common case, after a wait).
  if (test(request)) return impl_->of(request).fingerprint;
  std::lock_guard lock(impl_->table.mu);
  return impl_->of(request).fingerprint;
}

std::size_t TcpTransport::transferred(const RequestPtr& request) const {
  std::lock_guard lock(impl_->table.mu);
  return impl_->of(request).moved;
}

std::vector<std::pair<int, std::uint64_t>> TcpTransport::queued_fingerprints(Tag tag) const {
  std::lock_guard lock(impl_->table.mu);
  std::vector<std::pair<int, std::uint64_t>> out;
  if (impl_->table.pool.queued() == 0) return out;  // the usual case, asked often
  for (const auto& p : impl_->table.peers)
    p.queued_fingerprints(tag, out);
  return out;
}

std::vector<std::pair<Tag, std::uint64_t>> TcpTransport::queued_from(int peer) const {
  std::lock_guard lock(impl_->table.mu);
  std::vector<std::pair<Tag, std::uint64_t>> out;
  if (peer < 0 || peer >= impl_->options.world_size) return out;
  impl_->table.peer(peer).unexpected.for_each(
      [&](Tag tag, const auto& u) { out.emplace_back(tag, u->fingerprint); });
  return out;
}

bool TcpTransport::any_queued() const {
  return impl_->table.pool.queued() > 0;
}

ProgressClaim TcpTransport::claim_progress() {
  // A claim counts as a waiter: the background thread moves data only
  // while there are none (progress.hpp).
  auto* table = &impl_->table;
  ++table->waiters;
  return ProgressClaim([](void* t) { static_cast<Connections*>(t)->stop_waiting(); }, table);
}

void TcpTransport::wake_waiters() {
  // Only the thread that drives the sockets sleeps in poll(), and it
  // watches this eventfd (progress.cpp); a thread that waits for the
  // driver is woken as requests finish, within a millisecond.
  impl_->table.driver_wake.kick();
}

std::string TcpTransport::describe_peer(int peer) const {
  std::lock_guard lock(impl_->table.mu);
  if (peer < 0 || peer >= impl_->options.world_size) return fmt::format("rank {}", peer);
  return impl_->table.describe_peer(peer);
}

std::string TcpTransport::failure_of(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return {};
  std::lock_guard lock(impl_->table.mu);
  const auto& p = impl_->table.peer(peer);
  return p.state == PeerState::Failed ? p.failure : std::string();
}

std::string TcpTransport::describe() const {
  const auto all = split_published(impl_->listener.published());
  std::string lanes;
  for (std::size_t i = 1; i < all.size(); ++i)
    if (const auto split = split_host_port(all[i]))
      lanes += (lanes.empty() ? " (lanes also from " : ", ") + split->host;
  return "tcp on " + address() + lanes + (lanes.empty() ? "" : ")");
}

std::string TcpTransport::describe_lanes(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return {};
  std::lock_guard lock(impl_->table.mu);
  return impl_->table.peer(peer).lanes_report();  // empty without lanes
}

std::string TcpTransport::address() const {
  return impl_->listener.address();
}

void TcpTransport::prefetch() {
  auto& m = *impl_;
  std::vector<std::string> names;
  for (int r = 0; r < m.options.world_size; ++r)
    names.push_back(m.key(r));
  const auto values = m.store->multi_get(names);
  std::lock_guard lock(m.table.mu);
  for (std::size_t r = 0; r < values.size(); ++r)
    m.table.peers[r].published = values[r];
}

void TcpTransport::set_host_load(int ranks, int processors) {
  // Worth it where every rank has a processor; where ranks outnumber them,
  // a pacing algorithm's timer-driven sending measured faster.
  impl_->table.avoid_pacing.store(ranks <= processors, std::memory_order_relaxed);
}

void TcpTransport::set_streams(int streams) {
  if (impl_->options.settings.streams > 0) return;  // the user's number stays
  impl_->table.streams.store(std::clamp<int>(streams, 1, wire::kMaxLanes));
}

int TcpTransport::streams() const {
  return impl_->table.streams.load();
}

int TcpTransport::open_connections() const {
  std::lock_guard lock(impl_->table.mu);
  return static_cast<int>(std::count_if(
      impl_->table.peers.begin(), impl_->table.peers.end(),
      [](const PeerStream& p) { return p.connection.valid() && p.state == PeerState::Ready; }));
}

std::vector<TcpTransport::LaneUse> TcpTransport::lanes(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return {};
  std::lock_guard lock(impl_->table.mu);
  return impl_->table.peer(peer).lane_uses();
}

}  // namespace collie::transport
