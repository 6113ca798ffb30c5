// One call being run: its buffer, its waits and what it has in flight
// (call_run.hpp); and settling requests after a failure (executor.hpp).
#include "call_run.hpp"

#include <algorithm>
#include <iterator>
#include <optional>

#include <fmt/format.h>

#include <collie/coarse_clock.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>

#include "group/tags.hpp"

namespace collie {

namespace {

constexpr std::chrono::milliseconds kFirstSlice{20};
constexpr std::chrono::milliseconds kLongestSlice{500};
// A snapshot larger than this is given back when its call ends.
constexpr std::size_t kKeptSnapshotBytes = std::size_t{1} << 20;

CallRun::Kept& thread_kept() {
  static thread_local CallRun::Kept kept;
  return kept;
}

}  // namespace

CallRun::CallRun(detail::Group& group, const Call& c, std::span<const Region> regions)
    : g(group),
      transport(group.transport()),
      call(c),
      esize(dtype_size(c.dtype)),
      tag(collective_tag(group.slot, c.sequence)),
      fingerprint(collie::fingerprint(c.signature())),
      segment(flow::segment_elements(group.world->config.segment_bytes, esize)),
      deadline(CoarseClock::now() + c.timeout),
      stall(group, c, deadline - c.timeout),
      trace(group.world->tracer.get()),
      engine(c.staging.engine.get()),
      diagnosis(group, c, tag, fingerprint, stall),
      regions_(regions),
      kept_(thread_kept()),
      sends_(kept_.sends),
      recvs_(kept_.recvs) {
  forget_posted();
}

CallRun::~CallRun() {
  abandon();
  for (auto* block : pinned_)
    engine->give_pinned(block);
  if (kept_.snapshot.capacity() > kKeptSnapshotBytes) std::vector<std::byte>().swap(kept_.snapshot);
}

const Region& CallRun::region_of(const collectives::Range& r) const {
  // The regions are in order of offset (an input in pieces may have many).
  auto it = std::upper_bound(regions_.begin(), regions_.end(), r.offset,
                             [](std::size_t off, const Region& region) { return off < region.offset; });
  if (it != regions_.begin()) {
    const auto& region = *std::prev(it);
    if (r.offset + r.count <= region.offset + region.count) return region;
  }
  throw Error(fmt::format("internal: range [{}, {}) of the working buffer is not mapped", r.offset,
                          r.offset + r.count));
}

std::byte* CallRun::at(const collectives::Range& r) const {
  const auto& region = region_of(r);
  return region.data + (r.offset - region.offset) * esize;
}

const std::byte* CallRun::initial_at(const collectives::Range& r) const {
  const auto& region = region_of(r);
  const std::byte* base = region.initial != nullptr ? region.initial : region.data;
  return base + (r.offset - region.offset) * esize;
}

int CallRun::device_of(const collectives::Range& r) const {
  return r.count == 0 ? -1 : region_of(r).device;
}

std::chrono::milliseconds CallRun::remaining() const {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - CoarseClock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

void CallRun::wait(const transport::RequestPtr& r, int with) {
  try {
    if (transport.test(r)) {  // done already (a send the kernel took): its error, if any
      transport.wait(r, std::chrono::milliseconds(0));
      return;
    }
    auto slice = kFirstSlice;
    while (!transport.wait_some(r, std::min(slice, remaining()))) {
      if (remaining().count() == 0 || waits_interrupted() != 0) {
        // Throws the TimeoutError (or InterruptedError).
        transport.wait(r, std::chrono::milliseconds(0));
        return;
      }
      stall.poll();
      slice = std::min(slice * 2, kLongestSlice);
    }
  } catch (const TimeoutError& e) {
    // The time waited is the call's, not this last wait's.
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        Clock::now() - (deadline - call.timeout));
    stall.final_poll();
    throw TimeoutError(call_timeout_text(e.what(), waited, call.timeout, stall.report()));
  } catch (const ConnectionError&) {
    diagnosis.explain_lost_connection(with);
    if (diagnosis.failed_world_rank < 0) diagnosis.failed_world_rank = peer(with);
    throw;
  }
}

void CallRun::wait_recv(const transport::RequestPtr& r, int from) {
  bool size_differs = false;
  std::string size_error;
  try {
    auto slice = kFirstSlice;
    while (!transport.wait_some(r, std::min(slice, remaining()))) {
      diagnosis.check_queued();
      diagnosis.check_board(from);
      if (remaining().count() == 0 || waits_interrupted() != 0) {
        wait(r, from);  // throws the TimeoutError (or InterruptedError)
        break;
      }
      stall.poll();
      slice = std::min(slice * 2, kLongestSlice);
    }
  } catch (const ConnectionError&) {
    diagnosis.explain_lost_connection(from);
    if (diagnosis.failed_world_rank < 0) diagnosis.failed_world_rank = peer(from);
    throw;
  } catch (const WithdrawnError& e) {  // the peer gave its call up: why comes after
    diagnosis.withdrawn(from, e.what());
  } catch (const RequestError& e) {  // a size mismatch: the fingerprint says why
    size_differs = true;
    size_error = e.what();
  }
  const auto theirs = transport.fingerprint(r);
  if (is_failure_notice(theirs)) {
    diagnosis.check_queued();  // a mismatch seen by another rank explains more
    diagnosis.reported_failure(theirs, from);
  }
  if (theirs != fingerprint) {
    diagnosis.found(from, theirs, fingerprint);
    throw MismatchError(diagnosis.mismatch(from, theirs));
  }
  if (size_differs) diagnosis.size_mismatch(from, size_error);
}

void CallRun::idle(const transport::RequestPtr& oldest, bool receive, int with) {
  diagnosis.check_queued();
  if (receive) diagnosis.check_board(with);
  stall.poll();
  if (remaining().count() == 0 || waits_interrupted() != 0) {
    if (receive) wait_recv(oldest, with);
    wait(oldest, with);  // throws the TimeoutError
  }
}

void CallRun::abandon() {
  struct Drain {
    device::Engine* e;
    ~Drain() {
      if (e != nullptr) e->drain();
    }
  } drain{engine};
  if (recvs_.empty() && sends_.empty()) return;  // every call that succeeded
  settle_requests(transport, recvs_, sends_);
  forget_posted();
}

std::byte* CallRun::take_block() {
  if (!blocks_free_.empty()) {
    auto* b = blocks_free_.back();
    blocks_free_.pop_back();
    return b;
  }
  auto* b = engine->take_pinned(segment * esize);
  pinned_.push_back(b);
  return b;
}

void CallRun::give_block(std::byte*& b) {
  if (b != nullptr) blocks_free_.push_back(b);
  b = nullptr;
}

std::byte* CallRun::snapshot_space(std::size_t elements) {
  auto& snapshot = kept_.snapshot;
  if (snapshot.size() < elements * esize) snapshot.resize(elements * esize);
  return snapshot.data();
}

void settle_requests(transport::Transport& t, std::span<const transport::RequestPtr> receives,
                     std::span<const transport::RequestPtr> sends) {
  // Receives first: withdrawn at once (one half-way has the rest of its
  // message dropped). Then sends: one half-way through its message gets a
  // moment to finish, since the peer may be alive and well (a mismatch, a
  // timeout elsewhere) and the notices that follow need the link: TCP cuts
  // a link whose send stops half-way (a byte stream cannot resume); shared
  // memory withdraws the message and the pair goes on. (The grace is
  // counted from the first send found under way: most failures leave none,
  // and read no clock here.)
  constexpr std::chrono::milliseconds kSendGrace{1000};
  std::optional<CallRun::Clock::time_point> until;
  for (const bool sending : {false, true}) {
    for (const auto& r : sending ? sends : receives) {
      if (t.test(r)) continue;
      try {
        if (sending && waits_interrupted() == 0) {
          if (!until) until = CallRun::Clock::now() + kSendGrace;
          const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
              *until - CallRun::Clock::now());
          if (left.count() > 0 && t.wait_some(r, left)) continue;
        }
        t.wait(r, std::chrono::milliseconds(0));
      } catch (const std::exception&) {
      }
    }
  }
}

}  // namespace collie
