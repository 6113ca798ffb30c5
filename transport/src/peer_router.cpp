// A Transport that hands each peer's requests to its backend
// (peer_router.hpp).
#include <algorithm>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/transport/peer_router.hpp>

#include "request_state.hpp"

namespace collie::transport {

namespace {
// How long a wait across backends polls them in turn before it sleeps.
constexpr auto kCrossSpin = std::chrono::microseconds(200);
}  // namespace

PeerRouter::PeerRouter(std::vector<std::shared_ptr<Transport>> backends,
                       std::vector<std::size_t> backend_of)
    : backends_(std::move(backends)), backend_of_(std::move(backend_of)) {
  if (backends_.empty()) throw ArgumentError("PeerRouter: no backends");
  for (const auto& b : backends_) {
    if (!b) throw ArgumentError("PeerRouter: a backend is null");
    if (b->rank() != backends_.front()->rank() ||
        b->world_size() != backends_.front()->world_size()) {
      throw ArgumentError(
          fmt::format("PeerRouter: backends disagree: '{}' is rank {} of {}, '{}' rank {} of {}",
                      backends_.front()->describe(), backends_.front()->rank(),
                      backends_.front()->world_size(), b->describe(), b->rank(), b->world_size()));
    }
  }
  if (backend_of_.size() != static_cast<std::size_t>(world_size())) {
    throw ArgumentError(fmt::format("PeerRouter: {} backend choices for a world of {}",
                                    backend_of_.size(), world_size()));
  }
  for (std::size_t p = 0; p < backend_of_.size(); ++p) {
    if (backend_of_[p] >= backends_.size()) {
      throw ArgumentError(fmt::format("PeerRouter: rank {} goes to backend {}, of {}", p,
                                      backend_of_[p], backends_.size()));
    }
  }
}

Transport& PeerRouter::backend(int peer, std::string_view op) const {
  check_peer(rank(), world_size(), peer, op);
  return *backends_[backend_of_[static_cast<std::size_t>(peer)]];
}

Transport& PeerRouter::answering(const RequestPtr& request) const {
  // A backend made the request, for a peer in range.
  return *backends_[backend_of_[static_cast<std::size_t>(request->peer())]];
}

int PeerRouter::rank() const {
  return backends_.front()->rank();
}

int PeerRouter::world_size() const {
  return backends_.front()->world_size();
}

RequestPtr PeerRouter::isend(int peer, Tag tag, const void* data, std::size_t bytes,
                             std::uint64_t fingerprint) {
  return backend(peer, "send to").isend(peer, tag, data, bytes, fingerprint);
}

RequestPtr PeerRouter::irecv(int peer, Tag tag, void* data, std::size_t bytes) {
  return backend(peer, "recv from").irecv(peer, tag, data, bytes);
}

RequestPtr PeerRouter::irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) {
  return backend(peer, "irecv_consume from").irecv_consume(peer, tag, bytes, std::move(consume));
}

void PeerRouter::wait(const RequestPtr& request, std::optional<std::chrono::milliseconds> timeout) {
  answering(request).wait(request, timeout);
}

bool PeerRouter::wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) {
  return answering(request).wait_some(request, timeout);
}

int PeerRouter::wait_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout) {
  if (requests.empty()) {  // drives every backend for the time (transport.hpp)
    const auto share = timeout / static_cast<int>(backends_.size());
    for (const auto& b : backends_)
      b->wait_any({}, share);
    return -1;
  }
  // All with one backend (the common case): it waits for them together.
  Transport& first = answering(requests.front());
  bool one = true;
  for (const auto& r : requests)
    one = one && &answering(r) == &first;
  if (one) return first.wait_any(requests, timeout);
  // Across backends. The wait holds every backend's claim, so that their
  // own threads leave the data to it. First it polls each backend in turn
  // (a wait with no time left polls once): a message within the host and
  // one from another host are both taken by this thread as they come. Then
  // it sleeps in one backend's wait, given every request, while the others'
  // threads watch their peers for it and wake it when one of theirs
  // finishes (watch_for, wake_waiters): one sleep, woken by either kind of
  // peer.
  using Clock = std::chrono::steady_clock;
  const auto began = Clock::now();
  const auto until = began + timeout;
  std::vector<std::pair<Transport*, std::vector<std::size_t>>> by_backend;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Transport* b = &answering(requests[i]);
    auto it = std::find_if(by_backend.begin(), by_backend.end(),
                           [b](const auto& entry) { return entry.first == b; });
    if (it == by_backend.end()) it = by_backend.insert(by_backend.end(), {b, {}});
    it->second.push_back(i);
  }
  std::vector<ProgressClaim> claims;
  for (auto& entry : by_backend)
    claims.push_back(entry.first->claim_progress());
  std::vector<RequestPtr> subset;
  const auto poll_each = [&](std::chrono::milliseconds slice) {
    for (auto& [b, indices] : by_backend) {
      subset.clear();
      for (std::size_t i : indices)
        subset.push_back(requests[i]);
      if (const int k = b->wait_any(subset, slice); k >= 0)
        return static_cast<int>(indices[static_cast<std::size_t>(k)]);
    }
    return -1;
  };
  do {
    if (const int k = poll_each(std::chrono::milliseconds(0)); k >= 0) return k;
  } while (Clock::now() - began < kCrossSpin && Clock::now() < until);
  std::vector<std::shared_ptr<void>> watches;
  for (auto& sleeper : by_backend) {
    Transport* s = sleeper.first;
    watches.clear();
    for (auto& other : by_backend) {
      if (other.first == s) continue;
      auto w = other.first->watch_for([s] { s->wake_waiters(); });
      if (!w) break;
      watches.push_back(std::move(w));
    }
    if (watches.size() + 1 < by_backend.size()) continue;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) return first_finished(requests);
    return s->wait_any(requests, left);
  }
  // No backend can watch for another: each waits a millisecond in turn.
  watches.clear();
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (const int k = poll_each(std::clamp(left, std::chrono::milliseconds(0),
                                           std::chrono::milliseconds(1)));
        k >= 0)
      return k;
    if (Clock::now() >= until) return -1;
  }
}

bool PeerRouter::test(const RequestPtr& request) const {
  return answering(request).test(request);
}

std::uint64_t PeerRouter::fingerprint(const RequestPtr& request) const {
  return answering(request).fingerprint(request);
}

std::size_t PeerRouter::transferred(const RequestPtr& request) const {
  return answering(request).transferred(request);
}

std::vector<std::pair<int, std::uint64_t>> PeerRouter::queued_fingerprints(Tag tag) const {
  std::vector<std::pair<int, std::uint64_t>> out;
  for (const auto& b : backends_) {
    auto some = b->queued_fingerprints(tag);
    out.insert(out.end(), some.begin(), some.end());
  }
  return out;
}

std::vector<std::pair<Tag, std::uint64_t>> PeerRouter::queued_from(int peer) const {
  if (peer < 0 || peer >= world_size()) return {};
  return backends_[backend_of_[static_cast<std::size_t>(peer)]]->queued_from(peer);
}

bool PeerRouter::any_queued() const {
  for (const auto& b : backends_)
    if (b->any_queued()) return true;
  return false;
}

ProgressClaim PeerRouter::claim_progress() {
  // One backend in use: its claim. Several: none. A caller waits on one
  // backend at a time, and a claim would keep the others' threads from
  // moving their data meanwhile: a send to a TCP peer, half written while
  // the caller waits for a shared-memory one, could then hold up the
  // world.
  std::size_t used = backends_.size();
  for (std::size_t b = 0; b < backends_.size(); ++b) {
    if (std::find(backend_of_.begin(), backend_of_.end(), b) == backend_of_.end()) continue;
    if (used != backends_.size()) return {};
    used = b;
  }
  return used < backends_.size() ? backends_[used]->claim_progress() : ProgressClaim();
}

void PeerRouter::set_host_load(int ranks, int processors) {
  for (auto& b : backends_)
    b->set_host_load(ranks, processors);
}

void PeerRouter::set_streams(int streams) {
  for (auto& b : backends_)
    b->set_streams(streams);
}

bool PeerRouter::shares_memory_with(int peer) const {
  if (peer < 0 || peer >= world_size()) return false;
  return backends_[backend_of_[static_cast<std::size_t>(peer)]]->shares_memory_with(peer);
}

std::unique_ptr<Board> PeerRouter::open_board(std::span<const int> members,
                                              std::uint32_t space) {
  std::size_t serving = backends_.size();  // none yet
  for (int m : members) {
    if (m == rank()) continue;
    if (m < 0 || m >= world_size()) return nullptr;
    const auto b = backend_of_[static_cast<std::size_t>(m)];
    if (serving != backends_.size() && b != serving) return nullptr;
    serving = b;
  }
  if (serving == backends_.size()) return nullptr;  // no other member
  return backends_[serving]->open_board(members, space);
}

std::string PeerRouter::describe_peer(int peer) const {
  if (peer < 0 || peer >= world_size()) return fmt::format("rank {}", peer);
  return backends_[backend_of_[static_cast<std::size_t>(peer)]]->describe_peer(peer);
}

std::string PeerRouter::failure_of(int peer) const {
  if (peer < 0 || peer >= world_size()) return {};
  return backends_[backend_of_[static_cast<std::size_t>(peer)]]->failure_of(peer);
}

std::string PeerRouter::describe_lanes(int peer) const {
  if (peer < 0 || peer >= world_size()) return {};
  return backends_[backend_of_[static_cast<std::size_t>(peer)]]->describe_lanes(peer);
}

std::string PeerRouter::describe() const {
  std::string out;
  for (std::size_t b = 0; b < backends_.size(); ++b) {
    // The ranks it serves, as runs: "0-3, 6".
    std::string ranks;
    for (std::size_t p = 0; p < backend_of_.size(); ++p) {
      if (backend_of_[p] != b || (p > 0 && backend_of_[p - 1] == b)) continue;
      std::size_t last = p;
      while (last + 1 < backend_of_.size() && backend_of_[last + 1] == b)
        ++last;
      ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ",
                           last == p ? fmt::format("{}", p) : fmt::format("{}-{}", p, last));
    }
    if (ranks.empty()) continue;
    out += fmt::format("{}{} (ranks {})", out.empty() ? "" : "; ", backends_[b]->describe(), ranks);
  }
  return out;
}

void PeerRouter::prefetch() {
  for (const auto& b : backends_)
    b->prefetch();
}

}  // namespace collie::transport
