#include "executor.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include <collie/log.hpp>

#include "stall.hpp"
#include "stream_reduce.hpp"
#include "trace.hpp"

namespace collie {

using collectives::Combine;
using collectives::Range;
using collectives::Schedule;
using Clock = std::chrono::steady_clock;

namespace {

struct FlowOp {
  enum Kind : std::uint8_t { Copy, Send, Recv };
  Kind kind = Send;
  bool reduce = false;    // a receive that reduces
  bool snapshot = false;  // a send from the snapshot
  std::uint32_t step = 0;
  int peer = -1;                 // group rank (none for a copy)
  collectives::Range range;      // what it sends, receives, or copies into
  collectives::Range from;       // a copy's source
  std::size_t snap_at = 0;       // a snapshot send: its bytes in snapshot_
  std::uint32_t blockers = 0;    // earlier ops not done, and the op before in line not posted
  std::uint32_t first_edge = 0;  // its dependents: edges_[first_edge, first_edge + edges)
  std::uint32_t edges = 0;
  std::int64_t next_in_line = -1;  // the next op with the same peer and direction
  transport::RequestPtr request;
  Tracer::Clock::time_point posted_at{};
};

struct FlowStep {
  std::uint32_t undone = 0;          // ops not done
  std::uint32_t unposted_sends = 0;  // a snapshot step: sends not yet posted
  std::uint32_t first_recv = 0, end = 0;
  bool snapshot = false;
};

// What one thread's flows keep between calls (a thread runs one collective
// at a time; the transport's consumers touch none of it): no allocation per
// call once the vectors have grown.
struct FlowScratch {
  std::vector<FlowOp> ops;
  std::vector<FlowStep> steps;
  std::vector<std::uint32_t> edges;          // ops[i]'s dependents: edges[first_edge, +edges)
  std::vector<std::uint32_t> ready;          // ops that may start, in the order they became so
  std::vector<std::uint32_t> inflight;       // ops posted, not yet seen done, in posting order
  std::vector<transport::RequestPtr> watch;  // their requests
  // build_flow()'s working space.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs;  // (before, after)
  std::vector<std::int64_t> seen;
  std::vector<std::int64_t> last_send, last_recv;
  std::vector<std::uint32_t> count;
  struct Access {
    std::uint32_t op;
    bool writes;
    std::size_t begin, end;
  };
  std::vector<Access> accesses;

  void clear() {
    ops.clear();
    watch.clear();
  }
};

FlowScratch& flow_scratch() {
  static thread_local FlowScratch scratch;
  return scratch;
}

// Runs one schedule over the transport (executor.hpp).
class Executor {
 public:
  Executor(ProcessGroup::Impl& g, const Call& call, std::vector<Region> regions,
           device::Engine* engine)
      : g_(g),
        transport_(g.transport()),
        call_(call),
        regions_(std::move(regions)),
        esize_(dtype_size(call.dtype)),
        tag_(collective_tag(g.slot, call.sequence)),
        fingerprint_(fingerprint(call.signature())),
        segment_(std::max<std::size_t>(1, g.world->config.segment_bytes / esize_)),
        deadline_(Clock::now() + call.timeout),
        stall_(g, call, deadline_ - call.timeout),
        trace_(g.world->tracer.get()),
        engine_(engine) {}

  ~Executor() {
    abandon();
    flow_.clear();  // the requests it holds
    for (auto* block : pinned_)
      engine_->give_pinned(block);
  }

  void run(const Schedule& schedule) {
    // This thread drives the sockets from here to the end: the transport's
    // own thread stays out of the way (no hand-off between threads).
    const auto claim = transport_.claim_progress();
    try {
      check_stray();
      run_steps(schedule);
      check_stray();
    } catch (const MismatchError& e) {
      // Everyone should hear the same diagnosis: it goes to the store first
      // (the first one found stays), then the rank whose message did not
      // match gets this rank's call (so it sees the mismatch itself), and
      // the others a notice that sends them to the store's diagnosis: they
      // may wait for this rank, or for one that waits for it.
      if (!second_hand_) {
        try {
          g_.world->job->store().compare_set(mismatch_key(call_.sequence), "", e.what(),
                                             std::chrono::milliseconds(1000));
        } catch (const std::exception& saving) {
          collie::log().debug("rank {}: saving the mismatch: {}", g_.rank, saving.what());
        }
      }
      abandon();
      // (A stray from an earlier call is no mismatch of this one: its
      // sender hears of it like everyone else.)
      const bool show = mismatched_from_ >= 0 && !second_hand_ && !stray_;
      if (show) notify({mismatched_from_}, fingerprint_);
      std::vector<int> peers;
      const int n = static_cast<int>(g_.members.size());
      if (n <= 64) {
        for (int p = 0; p < n; ++p)
          if (p != g_.rank && (p != mismatched_from_ || !show)) peers.push_back(p);
      } else {
        peers = schedule_peers(schedule);
      }
      const int culprit = mismatched_from_ >= 0 ? peer(mismatched_from_) : peer(g_.rank);
      notify(peers, failure_notice(mismatch_culprit_ >= 0 ? mismatch_culprit_ : culprit,
                                   FailureReason::Mismatch));
      throw;
    } catch (const ConnectionError& e) {
      blame(e.what());  // first: the launcher may stop this rank any moment now
      abandon();
      tell_peers(schedule);
      throw;
    } catch (const TimeoutError& e) {
      // Its own timeout (or one another rank reported): the peers stop too,
      // told whom this rank waited for. The blame and the report first: the
      // launcher may stop this rank any moment now.
      const bool own = failed_world_rank_ < 0;
      if (own) {
        failed_world_rank_ = stall_.culprit() >= 0 ? stall_.culprit() : peer(g_.rank);
        failed_reason_ = FailureReason::TimedOut;
      }
      blame(e.what());
      if (own) {
        try {
          g_.world->job->store().set(
              fmt::format("stall/final/{}/{}", g_.slot, call_.sequence),
              fmt::format("{} {} {}", failed_world_rank_, g_.rank, stall_.report()),
              std::chrono::milliseconds(1000));
        } catch (const std::exception& saving) {
          collie::log().debug("rank {}: saving the stall report: {}", g_.rank, saving.what());
        }
      }
      abandon();
      tell_peers(schedule, true);
      throw;
    } catch (const InterruptedError&) {
      // This rank was asked to stop: its peers hear why it leaves.
      abandon();
      failed_world_rank_ = peer(g_.rank);
      failed_reason_ = FailureReason::Interrupted;
      tell_peers(schedule);
      throw;
    } catch (const device::DeviceError& e) {
      // This rank's device failed: its peers fail too, as for a dead rank.
      failed_world_rank_ = peer(g_.rank);
      failed_reason_ = FailureReason::DeviceError;
      blame(e.what());
      abandon();
      tell_peers(schedule);
      throw;
    }
  }

 private:
  static constexpr std::size_t kStagedSends = 4;  // device send segments in flight
  static constexpr std::size_t kStagedRecvs = 8;  // staged receive segments posted or copying back

  // Says in the store whom this rank's failure blames (the first failure
  // only), for `collie launch`'s summary: "blame/<world rank>" holds
  // "<blamed world rank> <message>".
  void blame(const std::string& why) const {
    if (failed_world_rank_ < 0) return;
    try {
      g_.world->job->store().compare_set(
          blame_key(peer(g_.rank)), "",
          fmt::format("{} rank {}: {} #{} on {}: {}", failed_world_rank_, peer(g_.rank),
                      describe(call_.signature(), false), call_.sequence, g_.name,
                      why.substr(0, 2000)),
          std::chrono::milliseconds(1000));
    } catch (const std::exception& e) {
      collie::log().debug("rank {}: saying whom the failure blames: {}", g_.rank, e.what());
    }
  }

  // Tells every peer of the schedule but the failed rank (unless `all`)
  // which rank failed.
  void tell_peers(const Schedule& schedule, bool all = false) {
    if (failed_world_rank_ < 0) return;
    std::vector<int> peers;
    for (int p : schedule_peers(schedule))
      if (all || peer(p) != failed_world_rank_) peers.push_back(p);
    notify(peers, failure_notice(failed_world_rank_, failed_reason_));
  }

  // The group ranks this rank's schedule sends to or receives from.
  static std::vector<int> schedule_peers(const Schedule& schedule) {
    std::vector<int> peers;
    for (const auto& step : schedule.steps)
      for (const auto* list : {&step.sends, &step.recvs})
        for (const auto& t : *list)
          if (std::find(peers.begin(), peers.end(), t.peer) == peers.end()) peers.push_back(t.peer);
    return peers;
  }

  // Where the first diagnosis of a mismatch in call #`sequence` is kept.
  // Where a rank's first failure says whom it blames (blame()).
  static std::string blame_key(int world_rank) { return fmt::format("blame/{}", world_rank); }

  std::string mismatch_key(std::uint64_t sequence) const {
    return fmt::format("mismatch/{}/{}", g_.slot, sequence);
  }

  // The diagnosis another rank saved for call #`sequence`, if any.
  std::optional<std::string> saved_mismatch(std::uint64_t sequence) const {
    try {
      return g_.world->job->store().try_get(mismatch_key(sequence),
                                            std::chrono::milliseconds(1000));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  // How long a broken connection waits for a mismatched message that would
  // explain it.
  static constexpr std::chrono::milliseconds kMismatchGrace{250};

  struct Pending {
    transport::RequestPtr request;
    int peer = 0;  // group rank
  };

  const Region& region_of(const Range& r) const {
    for (const auto& region : regions_) {
      if (r.offset >= region.offset && r.offset + r.count <= region.offset + region.count)
        return region;
    }
    throw Error(fmt::format("internal: range [{}, {}) of the working buffer is not mapped",
                            r.offset, r.offset + r.count));
  }
  std::byte* at(const Range& r) const {
    const auto& region = region_of(r);
    return region.data + (r.offset - region.offset) * esize_;
  }
  int device_of(const Range& r) const { return r.count == 0 ? -1 : region_of(r).device; }

  int peer(int group_rank) const { return g_.members[static_cast<std::size_t>(group_rank)]; }

  std::chrono::milliseconds remaining() const {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

  std::string mismatch(int from, std::uint64_t theirs) const {
    const auto mine = call_.signature();
    const auto other = decode_fingerprint(theirs);
    // The algorithm matters only when it is all that differs.
    const bool algo = describe(mine, false) == describe(other, false);
    return fmt::format(
        "rank {}: collective #{} on {} does not match: rank {} called {} but rank {} "
        "called {}",
        g_.rank, call_.sequence, g_.name, from, describe(other, algo), g_.rank,
        describe(mine, algo));
  }

  // Waits for a request with group rank `with`, in slices (the stall
  // inspector looks between them); remembers who failed.
  void wait(const transport::RequestPtr& r, int with) {
    try {
      if (transport_.test(r)) {  // done already (a send the kernel took): its error, if any
        transport_.wait(r, std::chrono::milliseconds(0));
        return;
      }
      auto slice = std::chrono::milliseconds(20);
      while (!transport_.wait_some(r, std::min(slice, remaining()))) {
        if (remaining().count() == 0 || waits_interrupted() != 0) {
          // Throws the TimeoutError (or InterruptedError).
          transport_.wait(r, std::chrono::milliseconds(0));
          return;
        }
        stall_.poll();
        slice = std::min(slice * 2, std::chrono::milliseconds(500));
      }
    } catch (const TimeoutError& e) {
      // The time waited is the call's, not this last wait's.
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
          Clock::now() - (deadline_ - call_.timeout));
      stall_.final_poll();
      throw TimeoutError(fmt::format(
          "{}: the call gave up after {} (its timeout: {}, from CollectiveOptions::timeout or "
          "COLLIE_TIMEOUT){}",
          e.what(), describe_duration(waited), describe_duration(call_.timeout),
          stall_.report().empty() ? "" : "; the stall inspector found: " + stall_.report()));
    } catch (const ConnectionError&) {
      explain_lost_connection(with);
      if (failed_world_rank_ < 0) failed_world_rank_ = peer(with);
      throw;
    }
  }

  // A connection broke. A peer that left may have left because it ran
  // another call, or failed on its own device and said so: such messages
  // wait here or are on their way (perhaps over a connection still being
  // set up), and they are the news. Look for a moment, moving the data
  // meanwhile; throws the better error if one is found.
  //
  // A peer that failed in an earlier call (its last messages to this rank
  // were sent before it failed) told this rank under that call's tag, then
  // left: its notice waits in the queue, and it is the news, not the
  // closed connection.
  void explain_lost_connection(int with) {
    if (explained_) return;
    explained_ = true;
    const auto until = Clock::now() + kMismatchGrace;
    for (;;) {
      check_queued();
      if (Clock::now() >= until) break;
      // This call's claim keeps the background thread out: it reads what
      // is on its way itself (another rank's message of this call, say).
      transport_.wait_any({}, std::chrono::milliseconds(10));
    }
    for (const auto& [tag, theirs] : transport_.queued_from(peer(with)))
      if (tag != tag_ && is_failure_notice(theirs))
        reported_failure(theirs, with, tag & ((std::uint64_t{1} << 40) - 1));
    // A rank that found a mismatch saved it before it dropped anything.
    if (auto saved = saved_mismatch(call_.sequence)) {
      second_hand_ = true;
      throw MismatchError(fmt::format("rank {}: {} (its connection to rank {} broke after that)",
                                      g_.rank, *saved, with));
    }
    // A peer that failed said whom it blames before it did anything else
    // (blame()); if it then exited at once, its notice to this rank may
    // have died with the connection (unread data makes its kernel reset
    // the link, and the reset drops what this rank had not yet read).
    std::optional<std::string> blamed;
    try {
      blamed = g_.world->job->store().try_get(blame_key(peer(with)), std::chrono::milliseconds(500));
    } catch (const std::exception& e) {
      collie::log().debug("rank {}: looking for rank {}'s blame: {}", g_.rank, with, e.what());
    }
    if (!blamed) return;
    int culprit = -1;
    std::istringstream in(*blamed);
    if (!(in >> culprit) || culprit < 0 || culprit == peer(g_.rank) || culprit == peer(with))
      return;
    // What rank `with` said of it (why the culprit failed: its device, a
    // timeout, a lost host), after the "<culprit> " of the record.
    std::string said;
    std::getline(in >> std::ws, said);
    failed_world_rank_ = culprit;
    throw ConnectionError(fmt::format(
        "rank {}: {} failed, as rank {} recorded before it left (its connection to rank {} broke "
        "after that){}",
        g_.rank, transport_.describe_peer(culprit), with, with,
        said.empty() ? "" : "; it said: " + said));
  }

  // Waits for a receive from group rank `from` and checks who sent it. A
  // wait that takes long looks, now and then, for a message under this
  // collective's tag from a rank it does not expect one from: a rank that
  // disagrees on the call (another root, say) may send where no one listens.
  void wait_recv(const transport::RequestPtr& r, int from) {
    bool size_differs = false;
    std::string size_error;
    try {
      auto slice = std::chrono::milliseconds(20);
      while (!transport_.wait_some(r, std::min(slice, remaining()))) {
        check_queued();
        if (remaining().count() == 0 || waits_interrupted() != 0) {
          wait(r, from);  // throws the TimeoutError (or InterruptedError)
          break;
        }
        stall_.poll();
        slice = std::min(slice * 2, std::chrono::milliseconds(500));
      }
    } catch (const ConnectionError&) {
      explain_lost_connection(from);
      if (failed_world_rank_ < 0) failed_world_rank_ = peer(from);
      throw;
    } catch (const RequestError& e) {  // a size mismatch: the fingerprint says why
      size_differs = true;
      size_error = e.what();
    }
    const auto theirs = transport_.fingerprint(r);
    if (is_failure_notice(theirs)) {
      check_queued();  // a mismatch seen by another rank explains more
      reported_failure(theirs, from);
    }
    if (theirs != fingerprint_) {
      mismatched_from_ = from;
      throw MismatchError(mismatch(from, theirs));
    }
    if (size_differs) {
      // A rank that found a mismatch may have said so in a message of its
      // own call: its diagnosis is in the store.
      if (auto saved = saved_mismatch(call_.sequence)) {
        second_hand_ = true;
        throw MismatchError(fmt::format("rank {}: as rank {} found: {}", g_.rank, from, *saved));
      }
      throw MismatchError(
          fmt::format("{}; both ranks called {}, so they cut it into different segments: set "
                      "COLLIE_SEGMENT_BYTES alike on every rank",
                      size_error, describe(call_.signature(), true)));
    }
  }

  // Looks at messages under this collective's tag that no receive asked
  // for: another call's fingerprint is a mismatch (checked first: it is the
  // cause), a failure notice is news of a dead rank.
  void check_queued() {
    check_stray();
    const auto queued = transport_.queued_fingerprints(tag_);
    for (bool notices : {false, true}) {
      for (const auto& [world_peer, theirs] : queued) {
        if (theirs == fingerprint_ || is_failure_notice(theirs) != notices) continue;
        const auto it = std::find(g_.members.begin(), g_.members.end(), world_peer);
        if (it == g_.members.end()) continue;
        const int from = static_cast<int>(it - g_.members.begin());
        if (notices) reported_failure(theirs, from);
        mismatched_from_ = from;
        throw MismatchError(mismatch(from, theirs));
      }
    }
  }

  // Messages under the tags of the group's last few calls, which ended
  // here: no receive will take them. A rank that sent one called something else (a
  // broadcast whose root it thought was itself, say: it sent and returned,
  // and the others, rooted elsewhere, finished without reading it), or
  // failed after this rank had finished and said so. Looked at when a call
  // starts, between its waits and when it ends (cheap: nothing is queued,
  // usually): a peer's stray comes before its messages of later calls, so
  // one this call received from is found here.
  void check_stray() {
    if (!transport_.any_queued()) return;  // the usual case: one atomic load
    for (std::uint64_t back = 1; back <= Progress::kRecent && back <= call_.sequence; ++back) {
      const auto earlier = call_.sequence - back;
      const auto i = earlier % Progress::kRecent;
      // Only a call that ended here (not one still running beside this one).
      if (g_.progress.recent_sequence[i].load(std::memory_order_acquire) !=
          static_cast<std::int64_t>(earlier))
        continue;
      const auto queued = transport_.queued_fingerprints(collective_tag(g_.slot, earlier));
      if (queued.empty()) continue;
      const auto mine = decode_fingerprint(g_.progress.recent_fingerprint[i].load());
      for (bool notices : {false, true}) {
        for (const auto& [world_peer, theirs] : queued) {
          if (is_failure_notice(theirs) != notices) continue;
          const auto it = std::find(g_.members.begin(), g_.members.end(), world_peer);
          if (it == g_.members.end()) continue;
          const int from = static_cast<int>(it - g_.members.begin());
          if (notices) reported_failure(theirs, from, earlier);
          const auto other = decode_fingerprint(theirs);
          const bool algo = describe(mine, false) == describe(other, false);
          mismatched_from_ = from;
          stray_ = true;
          throw MismatchError(fmt::format(
              "rank {}: collective #{} on {} did not match (found after it ended here, in #{}): "
              "rank {} sent a message for it that no receive took: rank {} called {} but rank {} "
              "called {}",
              g_.rank, earlier, g_.name, call_.sequence, from, from, describe(other, algo), g_.rank,
              describe(mine, algo)));
        }
      }
    }
  }

  // Group rank `from` sent a failure notice naming a dead rank (in the
  // group's earlier call #`earlier`, if given: it left after it).
  [[noreturn]] void reported_failure(std::uint64_t notice, int from,
                                     std::optional<std::uint64_t> earlier = std::nullopt) {
    failed_world_rank_ = failed_rank(notice);
    failed_reason_ = failure_reason(notice);
    if (failed_reason_ == FailureReason::TimedOut) {
      // The rank that timed out saved what it found before telling:
      // "<culprit> <its group rank> <report>".
      std::string report;
      int gave_up = from;
      try {
        if (auto saved = g_.world->job->store().try_get(
                fmt::format("stall/final/{}/{}", g_.slot, earlier.value_or(call_.sequence)),
                std::chrono::milliseconds(1000))) {
          std::istringstream in(*saved);
          int culprit = -1;
          in >> culprit >> gave_up;
          in.get();
          std::getline(in, report, '\0');
        }
      } catch (const std::exception&) {
      }
      const int me = peer(g_.rank);
      std::string waited_for;
      if (failed_world_rank_ == me)
        waited_for = ", waiting for this rank";
      else if (gave_up < 0 || gave_up >= static_cast<int>(g_.members.size()) ||
               peer(gave_up) != failed_world_rank_)
        waited_for = fmt::format(", waiting for {}", transport_.describe_peer(failed_world_rank_));
      throw TimeoutError(fmt::format(
          "rank {}: rank {} gave up on this collective at its timeout{}{}{}", g_.rank, gave_up,
          waited_for, gave_up == from ? "" : fmt::format(" (as rank {} reported)", from),
          report.empty() ? "" : "; the stall inspector found: " + report));
    }
    if (failed_reason_ == FailureReason::Mismatch) {
      // Another rank found a mismatch: its diagnosis, not a guess from here.
      second_hand_ = true;
      mismatch_culprit_ = failed_world_rank_;
      failed_world_rank_ = -1;
      const auto saved = saved_mismatch(earlier.value_or(call_.sequence));
      if (saved)
        throw MismatchError(fmt::format("rank {}: as rank {} found: {}", g_.rank, from, *saved));
      throw MismatchError(fmt::format(
          "rank {}: collective #{} on {} does not match: {} called another collective than its "
          "peers, as rank {} found",
          g_.rank, earlier.value_or(call_.sequence), g_.name,
          transport_.describe_peer(mismatch_culprit_), from));
    }
    if (failed_reason_ == FailureReason::Interrupted) {
      const auto who = std::find(g_.members.begin(), g_.members.end(), failed_world_rank_);
      const bool itself = who != g_.members.end() && who - g_.members.begin() == from;
      throw ConnectionError(
          fmt::format("rank {}: {} was asked to stop (a signal: SIGTERM or the like) during this "
                      "collective{}",
                      g_.rank, transport_.describe_peer(failed_world_rank_),
                      itself ? "" : fmt::format(", as rank {} reported", from)));
    }
    if (failed_reason_ == FailureReason::DeviceError) {
      const auto who = std::find(g_.members.begin(), g_.members.end(), failed_world_rank_);
      const bool itself = who != g_.members.end() && who - g_.members.begin() == from;
      throw ConnectionError(fmt::format(
          "rank {}: {} failed during this collective: its device failed (a CUDA error there, "
          "which its own error names){}",
          g_.rank, transport_.describe_peer(failed_world_rank_),
          itself ? "" : fmt::format(", as rank {} reported", from)));
    }
    if (earlier) {
      throw ConnectionError(fmt::format(
          "rank {}: {} failed, as rank {} reported (its connection to it broke during #{} on {})",
          g_.rank, transport_.describe_peer(failed_world_rank_), from, *earlier, g_.name));
    }
    throw ConnectionError(fmt::format(
        "rank {}: {} failed during this collective, as rank {} reported (its connection to it "
        "broke)",
        g_.rank, transport_.describe_peer(failed_world_rank_), from));
  }

  // Sends `fingerprint` in a 0-byte message to each of `peers` (group
  // ranks): all posted at once, then one second in all to hand them over.
  // Errors are logged, not thrown: the collective has already failed.
  void notify(const std::vector<int>& peers, std::uint64_t fingerprint) {
    const auto until = Clock::now() + std::chrono::seconds(1);
    std::vector<Pending> notices;
    for (int p : peers) {
      try {
        notices.push_back({transport_.isend(peer(p), tag_, nullptr, 0, fingerprint), p});
      } catch (const std::exception& e) {
        collie::log().debug("rank {}: telling rank {} about the failure: {}", g_.rank, p, e.what());
      }
    }
    for (const auto& n : notices) {
      try {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        transport_.wait(n.request, std::max(left, std::chrono::milliseconds(0)));
      } catch (const std::exception& e) {
        collie::log().debug("rank {}: telling rank {} about the failure: {}", g_.rank, n.peer,
                            e.what());
      }
    }
  }

  // Now, only when tracing (reading the clock is not free).
  Tracer::Clock::time_point mark() const {
    return trace_ != nullptr ? Tracer::now() : Tracer::Clock::time_point{};
  }

  // A schedule on host memory runs as one flow; one that touches device
  // memory step by step: each host step a flow of its own, each device step
  // staged.
  void run_steps(const Schedule& schedule) {
    bool device = false;
    for (const auto& step : schedule.steps)
      device = device || touches_device(step);
    if (!device) {
      run_flow(schedule, 0, schedule.steps.size());
      return;
    }
    for (std::size_t i = 0; i < schedule.steps.size(); ++i) {
      const auto& step = schedule.steps[i];
      if (!touches_device(step)) {
        run_flow(schedule, i, i + 1);
        continue;
      }
      const auto index = static_cast<std::uint32_t>(i);
      const auto step_begin = mark();
      for (const auto& c : step.copies) {
        const auto begin = mark();
        device::copy(engine_, at(c.to), device_of(c.to), at(c.from), device_of(c.from),
                     c.from.count * esize_);
        if (trace_)
          trace_->event(Tracer::Kind::Copy, begin, mark(), index, -1, c.from.count * esize_);
      }
      run_staged(step, index, step_begin);
    }
  }

  // ---- host steps: the dataflow executor ----
  //
  // Every copy, send and receive of the steps run together is an op on a
  // range of the working buffer, cut into segments. In schedule order (step
  // by step; in a step its copies, then its sends, then its receives), an op
  // waits only for the earlier ops that touch its range: what it reads, for
  // their last write; what it writes, for the last write and every read
  // since. Sends to a peer are posted in schedule order, and so are receives
  // from a peer (the transport matches them in that order). So a segment is
  // forwarded as soon as it is reduced, and a step's receives are posted
  // while the step before still runs wherever they touch nothing it touches.
  // A receive that reduces is consumed where it arrives (irecv_consume): the
  // bytes are combined straight from the transport's buffer, with no scratch
  // copy. Every op starts no later than it would if each step waited for the
  // one before, so what the schedules' rules make deadlock-free stays so.
  //
  // A step whose receives land where its sends read (recursive doubling)
  // sends from a snapshot, taken as each send is posted; its receives are
  // posted once all its sends are. The snapshot is a second address space
  // after the buffer's elements, so the next such step reuses it only once
  // the sends reading it are done.

  // Runs schedule.steps[first, last) on host memory.
  void run_flow(const Schedule& schedule, std::size_t first, std::size_t last) {
    build_flow(schedule, first, last);
    std::size_t next_ready = 0;
    std::size_t finished = 0;
    std::size_t oldest = 0;  // flow_steps_[oldest] is the first not done
    auto span_begin = mark();
    // Steps finish in order in the trace: a step's span runs from the end
    // of the one before to the moment it and every earlier step are done.
    auto step_done = [&] {
      while (oldest < flow_steps_.size() && flow_steps_[oldest].undone == 0) {
        if (trace_) {
          const auto now = mark();
          trace_->event(Tracer::Kind::Step, span_begin, now,
                        static_cast<std::uint32_t>(first + oldest), -1, 0);
          span_begin = now;
        }
        ++oldest;
      }
    };
    auto complete = [&](std::uint32_t i) {
      auto& op = ops_[i];
      ++finished;
      for (std::uint32_t e = op.first_edge; e < op.first_edge + op.edges; ++e)
        unblock(edges_[e]);
      --flow_steps_[op.step - first].undone;
    };
    auto slice = std::chrono::milliseconds(20);
    while (finished < ops_.size()) {
      bool moved = false;
      // Start what may start (a copy is done at once, and may free more).
      // Receives first: they cost nothing to post, and a peer's bytes then
      // find them, while sends are written (a send is written into the
      // kernel as it is posted; posted before the receives, the sends of a
      // step would fill both ways' socket buffers before anyone reads).
      while (next_ready < ready_.size()) {
        const std::size_t end = ready_.size();
        for (std::size_t k = next_ready; k < end; ++k) {
          const auto i = ready_[k];
          if (ops_[i].kind != FlowOp::Recv) continue;
          start(i, first);
          ready_[k] = kStarted;
        }
        for (std::size_t k = next_ready; k < end; ++k) {
          const auto i = ready_[k];
          if (i == kStarted) continue;
          start(i, first);
          if (ops_[i].kind == FlowOp::Copy) complete(i);
        }
        next_ready = end;
        moved = true;
      }
      ready_.clear();
      next_ready = 0;
      // Take what finished, in the order it was posted.
      std::size_t kept = 0;
      for (std::size_t k = 0; k < inflight_.size(); ++k) {
        const auto i = inflight_[k];
        auto& op = ops_[i];
        if (!transport_.test(op.request)) {
          watch_[kept] = std::move(watch_[k]);
          inflight_[kept++] = i;
          continue;
        }
        if (op.kind == FlowOp::Recv) {
          wait_recv(op.request, op.peer);  // checks who sent it; throws its error
          if (trace_) {
            // Receives overlap: each span runs from the later of its posting
            // and the thread's last span to when the thread saw it done.
            const auto now = mark();
            trace_->event(Tracer::Kind::Recv, std::max({op.posted_at, span_begin, lane_}), now,
                          static_cast<std::uint32_t>(op.step), op.peer, op.range.count * esize_,
                          op.reduce);
            lane_ = now;
          }
        } else {
          wait(op.request, op.peer);  // throws its error, if any
        }
        complete(i);
        moved = true;
      }
      inflight_.resize(kept);
      watch_.resize(kept);
      if (moved) {
        step_done();
        slice = std::chrono::milliseconds(20);
        continue;
      }
      if (inflight_.empty()) {
        throw Error(fmt::format(
            "rank {}: internal: {} #{} on {}: {} of {} segments are done, and none of the others "
            "is posted or may start (a dependency that never clears)",
            g_.rank, describe(call_.signature(), false), call_.sequence, g_.name, finished,
            ops_.size()));
      }
      if (transport_.wait_any(watch_, std::min(slice, remaining())) >= 0) continue;
      check_queued();
      stall_.poll();
      if (remaining().count() == 0 || waits_interrupted() != 0) {
        const auto& oldest_op = ops_[inflight_.front()];
        if (oldest_op.kind == FlowOp::Recv) wait_recv(oldest_op.request, oldest_op.peer);
        wait(oldest_op.request, oldest_op.peer);  // throws the TimeoutError
      }
      slice = std::min(slice * 2, std::chrono::milliseconds(500));
    }
    step_done();
    sends_.clear();
    recvs_.clear();
    flow_.clear();
  }

  static constexpr std::uint32_t kStarted = UINT32_MAX;  // in ready_: started already

  void unblock(std::uint32_t i) {
    if (--ops_[i].blockers == 0) ready_.push_back(i);
  }

  // Posts op `i` (a copy is made at once).
  void start(std::uint32_t i, std::size_t first) {
    auto& op = ops_[i];
    const auto begin = mark();
    const std::size_t bytes = op.range.count * esize_;
    switch (op.kind) {
      case FlowOp::Copy:
        device::copy(engine_, at(op.range), device_of(op.range), at(op.from), device_of(op.from),
                     bytes);
        if (trace_) {
          lane_ = mark();
          trace_->event(Tracer::Kind::Copy, begin, lane_, op.step, -1, bytes);
        }
        return;
      case FlowOp::Send: {
        const std::byte* data = at(op.range);
        if (op.snapshot) {
          std::memcpy(snapshot_.data() + op.snap_at, data, bytes);
          data = snapshot_.data() + op.snap_at;
        }
        op.request = transport_.isend(peer(op.peer), tag_, data, bytes, fingerprint_);
        sends_.push_back({op.request, op.peer});
        if (trace_) {
          lane_ = mark();
          trace_->event(Tracer::Kind::Send, begin, lane_, op.step, op.peer, bytes);
        }
        auto& step = flow_steps_[op.step - first];
        if (step.snapshot && --step.unposted_sends == 0)
          for (std::uint32_t r = step.first_recv; r < step.end; ++r)
            unblock(r);
        break;
      }
      case FlowOp::Recv:
        if (op.reduce) {
          op.request =
              transport_.irecv_consume(peer(op.peer), tag_, bytes,
                                       StreamReducer{call_.dtype, call_.op, esize_, at(op.range)});
        } else {
          op.request = transport_.irecv(peer(op.peer), tag_, at(op.range), bytes);
        }
        recvs_.push_back({op.request, op.peer});
        op.posted_at = begin;
        break;
    }
    inflight_.push_back(i);
    watch_.push_back(op.request);
    if (op.next_in_line >= 0) unblock(static_cast<std::uint32_t>(op.next_in_line));
  }

  // The ops of steps [first, last), their dependencies, and those ready.
  void build_flow(const Schedule& schedule, std::size_t first, std::size_t last) {
    ops_.clear();
    flow_steps_.clear();
    ready_.clear();
    inflight_.clear();
    watch_.clear();
    // The snapshot space: the largest snapshot step's sends. And how many
    // ops there will be.
    std::size_t snapshot_count = 0;
    std::size_t op_count = 0;
    for (std::size_t s = first; s < last; ++s) {
      const auto& step = schedule.steps[s];
      op_count += step.copies.size();
      for (const auto* list : {&step.sends, &step.recvs})
        for (const auto& t : *list)
          op_count += (t.range.count + segment_ - 1) / segment_;
      if (!collectives::receives_overlap_sends(step)) continue;
      std::size_t total = 0;
      for (const auto& t : step.sends)
        total += t.range.count;
      snapshot_count = std::max(snapshot_count, total);
    }
    if (snapshot_.size() < snapshot_count * esize_) snapshot_.resize(snapshot_count * esize_);
    ops_.reserve(op_count);

    auto& pairs = flow_.pairs;  // (before, after)
    auto& seen = flow_.seen;    // seen[d] == op: d is already a dependency of op
    pairs.clear();
    seen.assign(op_count, -1);
    auto dep = [&](std::int64_t d, std::uint32_t self, std::uint32_t skip_from) {
      if (d < 0 || d == self || static_cast<std::uint32_t>(d) >= skip_from) return;
      if (seen[static_cast<std::size_t>(d)] == self) return;
      seen[static_cast<std::size_t>(d)] = self;
      pairs.emplace_back(static_cast<std::uint32_t>(d), self);
      ++ops_[self].blockers;
    };
    // Few ops (small messages): every earlier access that overlaps and
    // conflicts (a write on either side) is a dependency. Many: who last
    // wrote, and who read since, each element (cells [key, next key)), so
    // that each op meets only its nearest predecessors.
    const bool few = op_count <= 64;
    auto& accesses = flow_.accesses;
    accesses.clear();
    struct Cell {
      std::int64_t writer = -1;
      std::vector<std::uint32_t> readers;
    };
    std::map<std::size_t, Cell> cells;
    if (!few) {
      cells.emplace(0, Cell{});
      cells.emplace(schedule.buffer_count + snapshot_count, Cell{});
    }
    auto split = [&](std::size_t at) {
      auto it = cells.lower_bound(at);
      if (it != cells.end() && it->first == at) return it;
      return cells.emplace_hint(it, at, std::prev(it)->second);
    };
    auto touch = [&](std::uint32_t self, const Range& r, bool writes, bool reads,
                     std::uint32_t skip_from) {
      if (few) {
        for (const auto& a : accesses)
          if ((writes || a.writes) && a.begin < r.offset + r.count && r.offset < a.end)
            dep(a.op, self, skip_from);
        if (writes || reads) accesses.push_back({self, writes, r.offset, r.offset + r.count});
        return;
      }
      auto it = split(r.offset);
      const auto end = split(r.offset + r.count);
      for (; it != end; ++it) {
        auto& cell = it->second;
        dep(cell.writer, self, skip_from);
        if (writes) {
          for (auto d : cell.readers)
            dep(d, self, skip_from);
          cell.readers.clear();
          cell.writer = self;
        }
        if (reads) cell.readers.push_back(self);
      }
    };
    const std::size_t n = g_.members.size();
    auto& last_send = flow_.last_send;
    auto& last_recv = flow_.last_recv;
    last_send.assign(n, -1);
    last_recv.assign(n, -1);
    auto in_line = [&](std::vector<std::int64_t>& line, int p, std::uint32_t self) {
      auto& prev = line[static_cast<std::size_t>(p)];
      if (prev >= 0) {
        ops_[static_cast<std::size_t>(prev)].next_in_line = self;
        ++ops_[self].blockers;
      }
      prev = self;
    };
    auto add = [&](const FlowOp& op) {
      ops_.push_back(op);
      return static_cast<std::uint32_t>(ops_.size() - 1);
    };
    for (std::size_t s = first; s < last; ++s) {
      const auto& step = schedule.steps[s];
      FlowStep fs;
      fs.snapshot = collectives::receives_overlap_sends(step);
      const auto step_first = static_cast<std::uint32_t>(ops_.size());
      for (const auto& c : step.copies) {
        FlowOp op;
        op.kind = FlowOp::Copy;
        op.step = static_cast<std::uint32_t>(s);
        op.range = c.to;
        op.from = c.from;
        const auto self = add(op);
        touch(self, c.from, false, true, UINT32_MAX);
        touch(self, c.to, true, false, UINT32_MAX);
      }
      const auto first_send = static_cast<std::uint32_t>(ops_.size());
      std::size_t snap_used = 0;  // elements
      // One op per segment of transfer `t`.
      auto segment = [&](FlowOp::Kind kind, const collectives::Transfer& t, std::size_t done) {
        FlowOp op;
        op.kind = kind;
        op.step = static_cast<std::uint32_t>(s);
        op.peer = t.peer;
        op.range = {t.range.offset + done, std::min(segment_, t.range.count - done)};
        op.snapshot = kind == FlowOp::Send && fs.snapshot;
        op.reduce = kind == FlowOp::Recv && t.combine == Combine::Reduce;
        return add(op);
      };
      for (const auto& t : step.sends) {
        for (std::size_t done = 0; done < t.range.count; done += segment_) {
          const auto self = segment(FlowOp::Send, t, done);
          const auto range = ops_[self].range;
          touch(self, range, false, true, UINT32_MAX);
          if (fs.snapshot) {
            ops_[self].snap_at = snap_used * esize_;
            // It writes its part of the snapshot, then the transport reads it.
            touch(self, {schedule.buffer_count + snap_used, range.count}, true, true, UINT32_MAX);
            snap_used += range.count;
            ++fs.unposted_sends;
          }
          in_line(last_send, t.peer, self);
        }
      }
      fs.first_recv = static_cast<std::uint32_t>(ops_.size());
      for (const auto& t : step.recvs) {
        for (std::size_t done = 0; done < t.range.count; done += segment_) {
          const auto self = segment(FlowOp::Recv, t, done);
          const auto range = ops_[self].range;
          // A snapshot step's own sends read the snapshot, not the buffer:
          // its receives wait for them to be posted instead (below).
          touch(self, range, true, false, fs.snapshot ? first_send : UINT32_MAX);
          if (fs.snapshot && fs.unposted_sends > 0) ++ops_[self].blockers;
          in_line(last_recv, t.peer, self);
        }
      }
      fs.end = static_cast<std::uint32_t>(ops_.size());
      fs.undone = fs.end - step_first;
      flow_steps_.push_back(fs);
    }
    // The dependents of each op, grouped by op.
    auto& count = flow_.count;
    count.assign(ops_.size(), 0);
    for (const auto& [before, after] : pairs)
      ++count[before];
    std::uint32_t at_edge = 0;
    for (std::size_t i = 0; i < ops_.size(); ++i) {
      ops_[i].first_edge = at_edge;
      ops_[i].edges = 0;
      at_edge += count[i];
    }
    edges_.resize(pairs.size());
    for (const auto& [before, after] : pairs)
      edges_[ops_[before].first_edge + ops_[before].edges++] = after;
    for (std::uint32_t i = 0; i < ops_.size(); ++i)
      if (ops_[i].blockers == 0) ready_.push_back(i);
  }

  // The step's last trace events; its requests are all done.
  void end_step(const collectives::Step& step, std::uint32_t index,
                Tracer::Clock::time_point step_begin, Tracer::Clock::time_point wait_begin) {
    if (trace_) {
      const auto end = mark();
      if (!step.sends.empty())
        trace_->event(Tracer::Kind::WaitSends, wait_begin, end, index, -1, 0);
      trace_->event(Tracer::Kind::Step, step_begin, end, index, -1, 0);
    }
    sends_.clear();
    recvs_.clear();
  }

  // Room for a snapshot of every send of `step`, if `snap`: the
  // executor's own, so that it outlives sends still under way when a step
  // throws (abandon() gives them a moment to finish, and runs last in the
  // destructor). The previous step's sends are all done.
  std::vector<std::byte>& snapshot_space(const collectives::Step& step, bool snap) {
    std::size_t total = 0;
    if (snap)
      for (const auto& t : step.sends)
        total += t.range.count;
    if (snapshot_.size() < total * esize_) snapshot_.resize(total * esize_);
    return snapshot_;
  }

  bool touches_device(const collectives::Step& step) const {
    if (engine_ == nullptr) return false;
    for (const auto* list : {&step.sends, &step.recvs})
      for (const auto& t : *list)
        if (device_of(t.range) >= 0) return true;
    return false;
  }

  // A pinned block of one segment, for this call (blocks_free_ first).
  std::byte* take_block() {
    if (!blocks_free_.empty()) {
      auto* b = blocks_free_.back();
      blocks_free_.pop_back();
      return b;
    }
    auto* b = engine_->take_pinned(segment_ * esize_);
    pinned_.push_back(b);
    return b;
  }
  void give_block(std::byte*& b) {
    if (b != nullptr) blocks_free_.push_back(b);
    b = nullptr;
  }

  struct StagedSend {
    int to = 0;
    const std::byte* data = nullptr;  // where the segment is (host or device)
    std::size_t count = 0;
    bool device = false;
    std::byte* block = nullptr;  // its pinned copy, while it has one
    device::Engine::Ticket copied = 0;
    transport::RequestPtr request;
    enum { Queued, Copying, Sending, Done } state = Queued;
  };
  struct StagedRecv {
    std::size_t transfer = 0;
    int from = 0;
    std::byte* target = nullptr;
    std::size_t count = 0;
    bool reduce = false;
    bool device = false;
    std::byte* block = nullptr;        // where the message lands (unless straight into host memory)
    std::byte* target_copy = nullptr;  // a device target's segment, for a reduction
    device::Engine::Ticket target_copied = 0;
    device::Engine::Ticket written = 0;  // its copy back to the device
    transport::RequestPtr request;
    enum { Queued, Posted, Writing, Done } state = Queued;
  };

  // A step with device memory in it (executor.hpp says how it runs).
  void run_staged(const collectives::Step& step, std::uint32_t index,
                  Tracer::Clock::time_point step_begin) {
    // Sends read from a host snapshot when a receive of this step lands
    // where they read.
    const bool snap = collectives::receives_overlap_sends(step);
    std::vector<std::byte>& snapshot = snapshot_space(step, snap);
    std::vector<StagedSend> sends;
    std::size_t used = 0;
    for (const auto& t : step.sends) {
      const auto begin = mark();
      const std::byte* data = at(t.range);
      bool dev = device_of(t.range) >= 0;
      if (snap) {
        device::copy(engine_, snapshot.data() + used, -1, data, device_of(t.range),
                     t.range.count * esize_);
        data = snapshot.data() + used;
        used += t.range.count * esize_;
        dev = false;
      }
      for (std::size_t done = 0; done < t.range.count; done += segment_) {
        StagedSend x;
        x.to = t.peer;
        x.data = data + done * esize_;
        x.count = std::min(segment_, t.range.count - done);
        x.device = dev;
        sends.push_back(std::move(x));
      }
      if (trace_)
        trace_->event(Tracer::Kind::Send, begin, mark(), index, t.peer, t.range.count * esize_);
    }
    std::vector<StagedRecv> recvs;
    for (std::size_t k = 0; k < step.recvs.size(); ++k) {
      const auto& t = step.recvs[k];
      std::byte* target = at(t.range);
      const bool dev = device_of(t.range) >= 0;
      for (std::size_t done = 0; done < t.range.count; done += segment_) {
        StagedRecv r;
        r.transfer = k;
        r.from = t.peer;
        r.target = target + done * esize_;
        r.count = std::min(segment_, t.range.count - done);
        r.reduce = t.combine == Combine::Reduce;
        r.device = dev;
        recvs.push_back(r);
      }
    }

    std::size_t send_next = 0;         // the next send to start
    std::size_t send_copying = 0;      // the oldest send whose copy may be pending
    std::size_t device_sends = 0;      // device sends holding a block
    std::vector<std::size_t> sending;  // device sends posted, not yet done (<= kStagedSends)
    std::size_t recv_next = 0;         // the next receive to post
    std::size_t recv_handled = 0;      // the oldest receive not yet handled
    std::size_t recv_done = 0;         // the oldest receive not done (its copy back may be pending)
    auto slice = std::chrono::milliseconds(20);
    for (;;) {
      bool moved = false;
      // Start sends: host ones at once, device ones as blocks allow.
      while (send_next < sends.size()) {
        auto& x = sends[send_next];
        if (x.device) {
          if (device_sends == kStagedSends) break;
          x.block = take_block();
          x.copied = engine_->to_host(x.block, x.data, x.count * esize_);
          x.state = StagedSend::Copying;
          ++device_sends;
        } else {
          x.request = transport_.isend(peer(x.to), tag_, x.data, x.count * esize_, fingerprint_);
          sends_.push_back({x.request, x.to});
          x.state = StagedSend::Sending;
        }
        ++send_next;
        moved = true;
      }
      // Send the segments whose copies are done (they finish in order).
      for (; send_copying < send_next; ++send_copying) {
        auto& x = sends[send_copying];
        if (x.state != StagedSend::Copying) continue;
        if (!engine_->done(x.copied)) break;
        x.request = transport_.isend(peer(x.to), tag_, x.block, x.count * esize_, fingerprint_);
        sends_.push_back({x.request, x.to});
        x.state = StagedSend::Sending;
        sending.push_back(send_copying);
        moved = true;
      }
      // A device send that has finished gives its block back.
      for (std::size_t j = 0; j < sending.size();) {
        auto& x = sends[sending[j]];
        if (!transport_.test(x.request)) {
          ++j;
          continue;
        }
        wait(x.request, x.to);  // throws its error, if any
        give_block(x.block);
        x.state = StagedSend::Done;
        --device_sends;
        sending.erase(sending.begin() + static_cast<std::ptrdiff_t>(j));
        moved = true;
      }
      // Post receives in order, kStagedRecvs at a time (those copying back
      // count: they hold blocks).
      while (recv_next < recvs.size() && recv_next - recv_done < kStagedRecvs) {
        auto& r = recvs[recv_next];
        std::byte* into = r.target;
        if (r.reduce || r.device) into = r.block = take_block();
        if (r.reduce && r.device) {
          r.target_copy = take_block();
          r.target_copied = engine_->to_host(r.target_copy, r.target, r.count * esize_);
        }
        r.request = transport_.irecv(peer(r.from), tag_, into, r.count * esize_);
        recvs_.push_back({r.request, r.from});
        r.state = StagedRecv::Posted;
        ++recv_next;
        moved = true;
      }
      // Receives that have arrived, in order: reduce or copy, then start
      // the copy back to the device (several may be in flight).
      while (recv_handled < recv_next) {
        auto& r = recvs[recv_handled];
        if (!transport_.test(r.request)) break;
        wait_recv(r.request, r.from);  // checks who sent it; throws its error
        const auto begin = mark();
        if (r.reduce) {
          std::byte* into = r.target;
          if (r.device) {
            engine_->wait(r.target_copied);
            into = r.target_copy;
          }
          reduce(call_.dtype, call_.op, into, r.block, r.count);
          if (trace_)
            trace_->event(Tracer::Kind::Reduce, begin, mark(), index, -1, r.count * esize_);
          if (r.device) give_block(r.block);
        }
        if (r.device) {
          r.written =
              engine_->to_device(r.target, r.reduce ? r.target_copy : r.block, r.count * esize_);
          r.state = StagedRecv::Writing;
        } else {
          give_block(r.block);
          r.state = StagedRecv::Done;
        }
        ++recv_handled;
        moved = true;
      }
      // Copies back that have finished, in order, free their blocks.
      while (recv_done < recv_handled) {
        auto& r = recvs[recv_done];
        if (r.state == StagedRecv::Writing) {
          if (!engine_->done(r.written)) break;
          give_block(r.block);
          give_block(r.target_copy);
          r.state = StagedRecv::Done;
          moved = true;
        }
        if (trace_ &&
            (recv_done + 1 == recvs.size() || recvs[recv_done + 1].transfer != r.transfer)) {
          const auto& t = step.recvs[r.transfer];
          trace_->event(Tracer::Kind::Recv, step_begin, mark(), index, t.peer,
                        t.range.count * esize_, t.combine == Combine::Reduce);
        }
        ++recv_done;
      }
      const bool sends_left = send_next < sends.size() || device_sends > 0;
      if (!sends_left && recv_done == recvs.size()) break;
      if (moved) {
        slice = std::chrono::milliseconds(20);
        continue;
      }
      // Nothing moved. A device copy finishes on its own: wait for the
      // oldest one something waits on.
      if (send_copying < send_next && sends[send_copying].state == StagedSend::Copying) {
        engine_->wait(sends[send_copying].copied);
        continue;
      }
      if (recv_done < recv_handled && recvs[recv_done].state == StagedRecv::Writing) {
        engine_->wait(recvs[recv_done].written);
        continue;
      }
      // Else the network: the oldest receive, or a send holding a block.
      std::vector<transport::RequestPtr> watch;
      int first_peer = -1;
      if (recv_handled < recv_next) {
        watch.push_back(recvs[recv_handled].request);
        first_peer = recvs[recv_handled].from;
      }
      for (std::size_t i : sending) {
        watch.push_back(sends[i].request);
        if (first_peer < 0) first_peer = sends[i].to;
      }
      if (watch.empty()) throw Error("internal: a staged step waits on nothing");
      if (transport_.wait_any(watch, std::min(slice, remaining())) < 0) {
        check_queued();
        stall_.poll();
        if (remaining().count() == 0 || waits_interrupted() != 0) {
          if (recv_handled < recv_next)
            wait_recv(watch.front(), first_peer);  // throws the TimeoutError
          wait(watch.front(), first_peer);
        }
        slice = std::min(slice * 2, std::chrono::milliseconds(500));
      }
    }
    // Host sends: wait for them now, as an unstaged step does.
    const auto wait_begin = mark();
    for (const auto& x : sends)
      if (x.state == StagedSend::Sending) wait(x.request, x.to);
    end_step(step, index, step_begin, wait_begin);
  }

  // After an error: withdraw (or give up on) what is still in flight, so
  // that nothing writes into the buffers once this returns (nor, on a
  // device, a copy queued before).
  void abandon() {
    struct Drain {
      device::Engine* e;
      ~Drain() {
        if (e != nullptr) e->drain();
      }
    } drain{engine_};
    if (recvs_.empty() && sends_.empty()) return;  // every call that succeeded
    std::vector<transport::RequestPtr> receives, sends;
    for (const auto& p : recvs_)
      receives.push_back(p.request);
    for (const auto& p : sends_)
      sends.push_back(p.request);
    settle_requests(transport_, receives, sends);
    recvs_.clear();
    sends_.clear();
  }

  ProcessGroup::Impl& g_;
  transport::Transport& transport_;
  const Call& call_;
  std::vector<Region> regions_;
  std::size_t esize_;
  std::uint64_t tag_;
  std::uint64_t fingerprint_;
  std::size_t segment_;  // elements
  Clock::time_point deadline_;
  StallCheck stall_;
  Tracer* trace_;               // null: not tracing
  std::vector<Pending> sends_;  // this step's, until waited for
  std::vector<Pending> recvs_;
  device::Engine* engine_;               // stages device regions; null: none
  std::vector<std::byte*> pinned_;       // this call's pinned blocks (one segment each)
  std::vector<std::byte*> blocks_free_;  // those of them not in use
  int failed_world_rank_ = -1;           // whose connection failed (seen here or reported)
  FailureReason failed_reason_ = FailureReason::ConnectionLost;
  int mismatched_from_ = -1;            // the group rank whose message did not match
  bool second_hand_ = false;            // the mismatch was found by another rank
  bool stray_ = false;                  // it was found in an earlier call (check_stray)
  int mismatch_culprit_ = -1;           // the world rank it named (second-hand)
  bool explained_ = false;              // explain_lost_connection() has looked
  std::vector<std::byte> snapshot_;     // snapshot_space()'s
  Tracer::Clock::time_point lane_{};    // when the last send, receive or copy span ended
  FlowScratch& flow_ = flow_scratch();  // run_flow()'s, this thread's
  std::vector<FlowOp>& ops_ = flow_.ops;
  std::vector<FlowStep>& flow_steps_ = flow_.steps;
  std::vector<std::uint32_t>& edges_ = flow_.edges;
  std::vector<std::uint32_t>& ready_ = flow_.ready;
  std::vector<std::uint32_t>& inflight_ = flow_.inflight;
  std::vector<transport::RequestPtr>& watch_ = flow_.watch;
};

}  // namespace

void settle_requests(transport::Transport& t, std::span<const transport::RequestPtr> receives,
                     std::span<const transport::RequestPtr> sends) {
  // Receives first: withdrawn at once (one half-way has the rest of its
  // message dropped). Then sends: one half-way through its message gets
  // a moment to finish, since the peer may be alive and well (a
  // mismatch, a timeout elsewhere) and the notices that follow need the
  // link: TCP cuts a link whose send stops half-way (a byte stream cannot
  // resume); shared memory withdraws the message and the pair goes on.
  // (The grace is counted from the first send found under way: most
  // failures leave none, and read no clock here.)
  constexpr std::chrono::milliseconds kSendGrace{1000};
  std::optional<Clock::time_point> until;
  for (const bool sending : {false, true}) {
    for (const auto& r : sending ? sends : receives) {
      if (t.test(r)) continue;
      try {
        if (sending && waits_interrupted() == 0) {
          if (!until) until = Clock::now() + kSendGrace;
          const auto left =
              std::chrono::duration_cast<std::chrono::milliseconds>(*until - Clock::now());
          if (left.count() > 0 && t.wait_some(r, left)) continue;
        }
        t.wait(r, std::chrono::milliseconds(0));
      } catch (const std::exception&) {
      }
    }
  }
}

void execute_schedule(ProcessGroup::Impl& g, const Call& call, const Schedule& schedule,
                      std::vector<Region> regions, device::Engine* engine) {
  Executor(g, call, std::move(regions), engine).run(schedule);
}

}  // namespace collie
