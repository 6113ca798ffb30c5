// The shared-memory backend's face (shm.hpp): making and closing the
// backend, the Transport calls, and what a wait that runs out of time does
// to its request (withdrawn, or the pair closed). The parts behind it:
// state.hpp.
#include <algorithm>
#include <cstring>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/host_cpus.hpp>
#include <collie/interrupt.hpp>
#include <collie/log.hpp>
#include <collie/transport/keys.hpp>

#include "bell.hpp"
#include "state.hpp"

namespace collie::transport {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using namespace shm;

void ShmTransport::Impl::time_out(const RequestPtr& request, std::chrono::milliseconds limit, int signal) {
  auto& r = of(request);
  auto& p = peer(r.peer());
  std::string why = timeout_text(describe_request(r), progress_text(r), limit, signal);
  if (!r.is_send && p.paused)
    why += paused_text(describe_peer(r.peer()), held, options.max_unexpected_bytes);
  auto self = std::static_pointer_cast<ShmRequest>(request);
  bool half_way_send = false;
  bool withdraw = false;
  if (r.is_send) {
    auto it = std::find(p.sends.begin(), p.sends.end(), self);
    if (std::find(p.in_flight.begin(), p.in_flight.end(), self) != p.in_flight.end()) {
      half_way_send = true;  // the receiver may be reading it from this rank's memory
    } else if (it != p.sends.end()) {
      withdraw = it == p.sends.begin() && p.send_done > 0;
      if (!withdraw) p.sends.erase(it);
      // Its entry of `withdrawn` must be free: the receiver has read past
      // the message it last named.
      const auto entry = p.send_header[1] % RingCursors::kWithdrawSlots;
      if (withdraw && p.out->tail.load(std::memory_order_acquire) < p.withdrawn_end[entry]) {
        withdraw = false;
        half_way_send = true;
      }
    }
  } else if (p.target == self) {
    p.target.reset();  // the rest of its message is dropped as it comes
  } else {
    p.posted.erase(r.tag, self);
  }
  if (withdraw)
    why += fmt::format("; the part already written was withdrawn ({} drops it, and the pair "
                       "goes on)",
                       describe_peer(r.peer()));
  fail(r, ErrorKind::Timeout, why);
  if (withdraw) {
    // Its rest is written as filler (the caller's buffer is the caller's
    // again), and the receiver told to drop the message: the pair goes on.
    const auto seq = p.send_header[1];
    p.out->withdrawn_of(seq).store(seq + 1, std::memory_order_release);
    p.sends.front() =
        make_pooled<ShmRequest>(r.peer(), true, r.tag, nullptr, r.bytes, r.fingerprint);
    p.withdrawn_end[seq % RingCursors::kWithdrawSlots] =
        p.out_head + (ring_bytes_of(r.bytes) - p.send_done);
    push(p);
  }
  if (half_way_send) {
    if (!p.sends.empty() && p.sends.front() == self) p.sends.pop_front();
    p.in_flight.erase_value(self);
    fail_peer(p, ErrorKind::Connection,
              fmt::format("the shared-memory channel to {} was closed after a send timed out "
                          "half-way through a message it could not withdraw (one read from "
                          "this rank's memory, or one of many withdrawn that {} has not read)",
                          describe_peer(r.peer()), describe_peer(r.peer())));
  }
}

ShmTransport::ShmTransport(std::shared_ptr<store::Store> store, TransportOptions options,
                           std::vector<int> local, std::string advertised) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw Error(fmt::format("transport: rank {} is outside a world of size {}", options.rank,
                            options.world_size));
  }
  std::sort(local.begin(), local.end());
  local.erase(std::unique(local.begin(), local.end()), local.end());
  if (!std::binary_search(local.begin(), local.end(), options.rank))
    local.insert(std::lower_bound(local.begin(), local.end(), options.rank), options.rank);
  for (int r : local)
    check_peer(options.rank, options.world_size, r, "share memory with");
  impl_ = std::make_unique<Impl>();
  auto& m = *impl_;
  m.options = std::move(options);
  m.store = std::move(store);
  m.local = std::move(local);
  m.ring_bytes = ring_bytes_for(m.local.size());
  m.advertised = std::move(advertised);  // "host:port": no spaces (record() writes "-" for none)
  shm::Stores stores = shm::Stores::Auto;
  if (m.options.settings.shm_stores == "cached") {
    stores = shm::Stores::Cached;
  } else if (m.options.settings.shm_stores == "streaming") {
    stores = shm::Stores::Streaming;
  } else if (m.options.settings.shm_stores != "auto") {
    throw Error(fmt::format(
        "shared memory: ring stores '{}': choose auto, cached or streaming", m.options.settings.shm_stores));
  }
  m.stream_receives = stores != shm::Stores::Cached && shm::streaming_stores_available();
  m.peers.resize(static_cast<std::size_t>(m.options.world_size));
  for (int r = 0; r < m.options.world_size; ++r) {
    auto& p = m.peer(r);
    p.copier = shm::RingCopier(stores);
    p.rank = r;
    p.local = std::binary_search(m.local.begin(), m.local.end(), r);
    p.slot = m.slot_of(r);
  }
  m.count_sharing(static_cast<int>(m.local.size()), host_cpus());
  m.use_ready = m.local.size() > shm::kReadyFrom && m.local.size() <= shm::kReadyWords * 64;
  m.my_slot = m.slot_of(m.options.rank);
  m.make_mailbox();
  for (int r : m.local) {
    if (r == m.options.rank) continue;
    auto& p = m.peer(r);  // its ring in this rank's mailbox: readable at once
    p.in = &m.mine.cursors(p.slot);
    p.in_ring = m.mine.ring(p.slot);
  }
  m.peer(m.options.rank).state = PeerState::Ready;  // itself: no ring
  m.peer(m.options.rank).posted.prime();
  m.peer(m.options.rank).unexpected.prime();
  m.store->set(keys::shm_mailbox(m.options.group, m.options.rank), m.record());
  m.background = std::thread([&m] { m.background_loop(); });
  collie::log().debug("rank {}: shared-memory mailbox for {} ranks of this host ({} each way)",
                      m.options.rank, m.local.size(), plural_bytes(m.ring_bytes));
}

ShmTransport::~ShmTransport() {
  auto& m = *impl_;
  m.stopping = true;
  m.idle_word.fetch_add(1);
  futex_wake(m.idle_word);
  {
    auto& h = m.mine.header();
    h.bell.fetch_add(1);
    futex_wake(h.bell);
  }
  m.background.join();
  std::lock_guard drive(m.drive_mu);
  std::lock_guard lock(m.mu);
  // What was sent whole stays readable: peers read it before they fail.
  m.mine.header().closed.store(1, std::memory_order_release);
  for (int rank : m.attached) {
    auto& p = m.peer(rank);
    if (p.state == PeerState::Ready) ring_bell(p.theirs->header());
  }
  for (auto& p : m.peers)
    m.fail_peer(p, ErrorKind::Connection, "the transport was shut down on this rank");
  for (auto& p : m.peers)
    if (p.pidfd >= 0) ::close(p.pidfd);
  if (m.memfd >= 0) ::close(m.memfd);
}

int ShmTransport::rank() const {
  return impl_->options.rank;
}

int ShmTransport::world_size() const {
  return impl_->options.world_size;
}

RequestPtr ShmTransport::isend(int peer, Tag tag, const void* data, std::size_t bytes,
                               std::uint64_t fingerprint) {
  auto& m = *impl_;
  check_peer(m.options.rank, m.options.world_size, peer, "send to");
  auto r = make_pooled<ShmRequest>(
      peer, true, tag, const_cast<std::byte*>(static_cast<const std::byte*>(data)), bytes,
      fingerprint);
  const auto lock = m.lock_reached(peer, "send to");
  if (peer == m.options.rank) {
    m.send_to_self(*r);
    return r;
  }
  auto& p = m.peer(peer);
  if (p.state != PeerState::Ready) {
    m.fail_for_peer(*r, p.failure_kind, p.failure);
    return r;
  }
  p.sends.push_back(r);
  if (p.sends.size() == 1) m.push(p);  // at once, on the caller's thread
  m.list_sending(p);
  return r;
}

RequestPtr ShmTransport::post(int peer, Tag tag, std::byte* data, std::size_t bytes,
                              Consumer consume) {
  auto& m = *impl_;
  const char* op = consume ? "irecv_consume from" : "recv from";
  check_peer(m.options.rank, m.options.world_size, peer, op);
  auto r = make_pooled<ShmRequest>(peer, false, tag, data, bytes, 0);
  r->consume = std::move(consume);
  const auto lock = m.lock_reached(peer, op);
  auto& p = m.peer(peer);
  m.post_recv(p, r);
  if (r->pending() && p.state == PeerState::Failed) m.fail_for_peer(*r, p.failure_kind, p.failure);
  return r;
}

RequestPtr ShmTransport::irecv(int peer, Tag tag, void* data, std::size_t bytes) {
  return post(peer, tag, static_cast<std::byte*>(data), bytes, {});
}

RequestPtr ShmTransport::irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) {
  if (!consume) {
    throw ArgumentError(
        fmt::format("rank {}: irecv_consume from rank {} (tag {}, {} bytes): the consumer is empty",
                    rank(), peer, tag, bytes));
  }
  return post(peer, tag, nullptr, bytes, std::move(consume));
}

void ShmTransport::wait(const RequestPtr& request, std::optional<std::chrono::milliseconds> timeout) {
  auto& m = *impl_;
  auto& r = m.of(request);
  const auto limit = timeout.value_or(m.options.timeout);
  bool interrupted = false;
  if (r.pending()) {
    m.drive_until_done(r, limit);
    if (r.pending()) {
      const int signal = waits_interrupted();
      std::lock_guard lock(m.mu);
      if (r.pending()) {
        m.time_out(request, limit, signal);
        interrupted = signal != 0;
      }
    }
  }
  if (r.state.load(std::memory_order_acquire) == static_cast<int>(State::Failed))
    throw_failure(r.error_kind, r.error, interrupted);
}

bool ShmTransport::wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) {
  if (!impl_->drive_until_done(impl_->of(request), timeout)) return false;
  wait(request, 0ms);
  return true;
}

int ShmTransport::wait_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout) {
  return impl_->drive_until_any(requests, timeout);
}

bool ShmTransport::test(const RequestPtr& request) const {
  return !impl_->of(request).pending();
}

std::uint64_t ShmTransport::fingerprint(const RequestPtr& request) const {
  if (test(request)) return impl_->of(request).fingerprint;
  std::lock_guard lock(impl_->mu);
  return impl_->of(request).fingerprint;
}

std::size_t ShmTransport::transferred(const RequestPtr& request) const {
  std::lock_guard lock(impl_->mu);
  return impl_->of(request).moved;
}

std::vector<std::pair<int, std::uint64_t>> ShmTransport::queued_fingerprints(Tag tag) const {
  std::vector<std::pair<int, std::uint64_t>> out;
  if (impl_->queued_count.load() == 0) return out;
  std::lock_guard lock(impl_->mu);
  for (const auto& p : impl_->peers)
    if (const auto* q = p.unexpected.find(tag))
      for (const auto& u : *q)
        out.emplace_back(p.rank, u->fingerprint);
  return out;
}

std::vector<std::pair<Tag, std::uint64_t>> ShmTransport::queued_from(int peer) const {
  std::vector<std::pair<Tag, std::uint64_t>> out;
  if (peer < 0 || peer >= impl_->options.world_size) return out;
  std::lock_guard lock(impl_->mu);
  impl_->peer(peer).unexpected.for_each(
      [&](Tag tag, const QueuedPtr& u) { out.emplace_back(tag, u->fingerprint); });
  return out;
}

bool ShmTransport::any_queued() const {
  return impl_->queued_count.load(std::memory_order_relaxed) > 0;
}

ProgressClaim ShmTransport::claim_progress() {
  auto* w = &impl_->waiters;
  ++*w;
  return ProgressClaim([](void* x) { --*static_cast<std::atomic<int>*>(x); }, w);
}

std::shared_ptr<void> ShmTransport::watch_for(std::function<void()> wake) {
  auto* m = impl_.get();
  std::uint64_t serial = 0;
  {
    std::lock_guard lock(m->watch_mu);
    serial = ++m->watch_serial;
    m->watches.emplace_back(serial, std::move(wake));
  }
  m->watching.fetch_add(1);
  // The background thread may sleep on its own futex (callers drive) or on
  // the bell (nobody waits): either way it looks again now.
  m->idle_word.fetch_add(1);
  futex_wake(m->idle_word);
  auto& h = m->mine.header();
  h.bell.fetch_add(1, std::memory_order_release);
  futex_wake(h.bell);
  return std::shared_ptr<void>(m, [serial](Impl* impl) {
    impl->watching.fetch_sub(1);
    std::lock_guard lock(impl->watch_mu);
    std::erase_if(impl->watches, [serial](const auto& w) { return w.first == serial; });
  });
}

void ShmTransport::set_host_load(int ranks, int processors) {
  // Ranks on other hosts of this machine (namespaces, COLLIE_HOST_ID) spin
  // on the same processors: a wait that does not yield takes them from the
  // rank it waits for.
  impl_->count_sharing(ranks, processors);
}

void ShmTransport::Impl::count_sharing(int ranks, int processors) {
  const int sharing = std::max(ranks, static_cast<int>(local.size()));
  const int cpus = std::max(processors, 1);
  crowded.store(sharing > cpus, std::memory_order_relaxed);
  per_processor.store((sharing + cpus - 1) / cpus, std::memory_order_relaxed);
  machine_ranks.store(sharing, std::memory_order_relaxed);
}

bool ShmTransport::shares_memory_with(int peer) const {
  return peer >= 0 && peer < impl_->options.world_size && impl_->peer(peer).local;
}

std::string ShmTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return fmt::format("rank {}", peer);
  std::lock_guard lock(impl_->mu);
  return impl_->describe_peer(peer);
}

std::string ShmTransport::failure_of(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return {};
  std::lock_guard lock(impl_->mu);
  const auto& p = impl_->peer(peer);
  return p.local && p.state == PeerState::Failed ? p.failure : std::string();
}

std::string ShmTransport::describe() const {
  return "shm";
}

void ShmTransport::prefetch() {
  auto& m = *impl_;
  std::vector<std::string> names;
  for (int r : m.local)
    names.push_back(keys::shm_mailbox(m.options.group, r));
  const auto values = m.store->multi_get(names);
  std::lock_guard lock(m.mu);
  for (std::size_t i = 0; i < values.size(); ++i)
    m.learn(m.peer(m.local[i]), values[i]);
}

}  // namespace collie::transport
