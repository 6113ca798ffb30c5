#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/transport/peer_router.hpp>

namespace collie::transport {

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
  // Across backends: each in turn, briefly, until the time is up.
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    for (std::size_t i = 0; i < requests.size(); ++i)
      if (answering(requests[i]).test(requests[i])) return static_cast<int>(i);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -1;
    const auto& r = requests.front();
    if (answering(r).wait_any(std::span(&r, 1), std::min(left, std::chrono::milliseconds(1))) == 0)
      return 0;
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

std::shared_ptr<void> PeerRouter::claim_progress() {
  if (backends_.size() == 1) return backends_.front()->claim_progress();  // no allocation of ours
  auto claims = std::make_shared<std::vector<std::shared_ptr<void>>>();
  for (const auto& b : backends_)
    if (auto c = b->claim_progress()) claims->push_back(std::move(c));
  return claims;
}

std::string PeerRouter::describe_peer(int peer) const {
  if (peer < 0 || peer >= world_size()) return fmt::format("rank {}", peer);
  return backends_[backend_of_[static_cast<std::size_t>(peer)]]->describe_peer(peer);
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
