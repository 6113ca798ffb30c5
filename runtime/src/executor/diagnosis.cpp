// One call's failure diagnosis: finding the news of a mismatch or a failed
// rank, and telling it (diagnosis.hpp).
#include "diagnosis.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>

#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/keys.hpp>

#include "group/job_store.hpp"
#include "executor/board_call.hpp"
#include "group/tags.hpp"

namespace collie {

using Clock = std::chrono::steady_clock;

namespace {

// How long a broken connection waits for a mismatched message that would
// explain it, at most: until this rank's transport has failed the peer too.
constexpr std::chrono::milliseconds kMismatchGrace{250};
// How long a store read or write of the diagnosis may take.
constexpr std::chrono::milliseconds kStoreWait{1000};

}  // namespace

std::string call_timeout_text(const std::string& what, std::chrono::milliseconds waited,
                              std::chrono::milliseconds timeout, const std::string& report) {
  return fmt::format(
      "{}: the call's timeout ran out after {} (it is {}, from CollectiveOptions::timeout or "
      "COLLIE_TIMEOUT){}",
      what, describe_duration(waited), describe_duration(timeout),
      report.empty() ? "" : "; the stall inspector found: " + report);
}

Diagnosis::Diagnosis(detail::Group& g, const Call& call, std::uint64_t tag,
                     std::uint64_t fingerprint, const StallCheck& stall)
    : g_(g), call_(call), tag_(tag), fingerprint_(fingerprint), stall_(stall) {}

int Diagnosis::group_rank_of(int world_rank) const {
  const auto it = std::find(g_.members.begin(), g_.members.end(), world_rank);
  return it == g_.members.end() ? -1 : static_cast<int>(it - g_.members.begin());
}

void Diagnosis::found(int from, std::uint64_t theirs, std::uint64_t mine) {
  mismatched_from = from;
  finding = Finding{peer(from), peer(g_.rank), theirs, mine};
}

std::optional<Diagnosis::Finding> Diagnosis::forwarded_finding(int from, std::uint64_t sequence) {
  auto& transport = g_.transport();
  const auto tag = diagnosis_tag(g_.slot, sequence);
  const auto queued = transport.queued_fingerprints(tag);
  const bool here = std::any_of(queued.begin(), queued.end(),
                                [&](const auto& q) { return q.first == peer(from); });
  if (!here) return std::nullopt;
  Finding f;
  try {
    // Queued whole before the notice that sent this rank here: taken at once.
    const auto r = transport.irecv(peer(from), tag, &f, sizeof f);
    transport.wait(r, std::chrono::milliseconds(0));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (f.culprit < 0 || f.finder < 0) return std::nullopt;
  return f;
}

std::string Diagnosis::mismatch(int from, std::uint64_t theirs) const {
  const auto mine = call_.signature();
  const auto other = decode_fingerprint(theirs);
  // The algorithm matters only when it is all that differs.
  const bool algo = describe(mine, false) == describe(other, false);
  return fmt::format(
      "rank {}: collective #{} on {} does not match: rank {} called {} but rank {} called {}",
      g_.rank, call_.sequence, g_.name, from, describe(other, algo), g_.rank,
      describe(mine, algo));
}

bool Diagnosis::with_store(std::string_view what,
                           const std::function<void(store::Store&)>& use) const {
  if (store_silent_) return false;
  try {
    use(g_.world->job->store());
    return true;
  } catch (const std::exception& e) {
    collie::log().debug("rank {}: {}: {}", g_.rank, what, e.what());
    if (dynamic_cast<const TimeoutError*>(&e) != nullptr) {
      store_silent_ = true;
      collie::log().debug("rank {}: the store did not answer in time: the rest of this "
                          "failure's diagnosis goes without it",
                          g_.rank);
    }
    return false;
  }
}

std::optional<std::string> Diagnosis::saved_mismatch(std::uint64_t sequence) const {
  std::optional<std::string> saved;
  with_store("reading a saved mismatch", [&](store::Store& s) {
    saved = s.try_get(keys::mismatch(g_.slot, sequence), kStoreWait);
  });
  return saved;
}

void Diagnosis::check_board(int from) {
  const auto theirs = board_call_of(g_, from, call_.sequence);
  if (!theirs || *theirs == fingerprint_) return;
  found(from, *theirs, fingerprint_);
  throw MismatchError(mismatch(from, *theirs));
}

void Diagnosis::check_queued() {
  check_stray();
  const auto queued = g_.transport().queued_fingerprints(tag_);
  for (bool notices : {false, true}) {
    for (const auto& [world_peer, theirs] : queued) {
      if (theirs == fingerprint_ || is_failure_notice(theirs) != notices) continue;
      const int from = group_rank_of(world_peer);
      if (from < 0) continue;
      if (notices) reported_failure(theirs, from);
      found(from, theirs, fingerprint_);
      throw MismatchError(mismatch(from, theirs));
    }
  }
}

// A rank that sent a stray called something else (a broadcast whose root it
// thought was itself, say: it sent and returned, and the others, rooted
// elsewhere, finished without reading it), or failed after this rank had
// finished and said so. A peer's stray comes before its messages of later
// calls, so one this call received from is found here.
void Diagnosis::check_stray() {
  auto& transport = g_.transport();
  if (!transport.any_queued()) return;  // the usual case: one atomic load
  for (std::uint64_t back = 1; back <= Progress::kRecent && back <= call_.sequence; ++back) {
    const auto earlier = call_.sequence - back;
    const auto i = earlier % Progress::kRecent;
    // Only a call that ended here (not one still running beside this one).
    if (g_.progress.recent_sequence[i].load(std::memory_order_acquire) !=
        static_cast<std::int64_t>(earlier))
      continue;
    const auto queued = transport.queued_fingerprints(collective_tag(g_.slot, earlier));
    if (queued.empty()) continue;
    const auto mine = decode_fingerprint(g_.progress.recent_fingerprint[i].load());
    for (bool notices : {false, true}) {
      for (const auto& [world_peer, theirs] : queued) {
        if (is_failure_notice(theirs) != notices) continue;
        const int from = group_rank_of(world_peer);
        if (from < 0) continue;
        if (notices) reported_failure(theirs, from, earlier);
        const auto other = decode_fingerprint(theirs);
        const bool algo = describe(mine, false) == describe(other, false);
        found(from, theirs, g_.progress.recent_fingerprint[i].load());
        stray = true;
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

void Diagnosis::reported_failure(std::uint64_t notice, int from,
                                 std::optional<std::uint64_t> earlier) {
  auto& transport = g_.transport();
  failed_world_rank = failed_rank(notice);
  failed_reason = failure_reason(notice);
  const auto sequence = earlier.value_or(call_.sequence);
  if (failed_reason == FailureReason::TimedOut) {
    // The rank that timed out saved what it found before telling:
    // "<culprit> <its group rank> <report>".
    std::string report;
    int gave_up = from;
    std::optional<std::string> saved;
    with_store("reading the stall report", [&](store::Store& s) {
      saved = s.try_get(keys::stall_final(g_.slot, sequence), kStoreWait);
    });
    if (saved) {
      std::istringstream in(*saved);
      int culprit = -1;
      in >> culprit >> gave_up;
      in.get();
      std::getline(in, report, '\0');
    }
    const int me = peer(g_.rank);
    std::string waited_for;
    if (failed_world_rank == me)
      waited_for = ", waiting for this rank";
    else if (gave_up < 0 || gave_up >= static_cast<int>(g_.members.size()) ||
             peer(gave_up) != failed_world_rank)
      waited_for = fmt::format(", waiting for {}", transport.describe_peer(failed_world_rank));
    throw TimeoutError(fmt::format(
        "rank {}: rank {}'s timeout ran out on this collective{}{}{}", g_.rank, gave_up,
        waited_for, gave_up == from ? "" : fmt::format(" (as rank {} reported)", from),
        report.empty() ? "" : "; the stall inspector found: " + report));
  }
  const bool itself = group_rank_of(failed_world_rank) == from;
  const std::string as_reported = itself ? "" : fmt::format(", as rank {} reported", from);
  switch (failed_reason) {
    case FailureReason::Mismatch: {
      // Another rank found a mismatch: its diagnosis, not a guess from here.
      second_hand = true;
      mismatch_culprit = failed_world_rank;
      failed_world_rank = -1;
      if (const auto saved = saved_mismatch(sequence))
        throw MismatchError(fmt::format("rank {}: as rank {} found: {}", g_.rank, from, *saved));
      // The store is gone (its host exited): what the finder sent along.
      if (const auto f = forwarded_finding(from, sequence)) {
        finding = *f;
        const auto culprit = decode_fingerprint(f->culprit_call);
        const auto finder = decode_fingerprint(f->finder_call);
        const bool algo = describe(culprit, false) == describe(finder, false);
        const auto name = [&](int world_rank) {
          const int r = group_rank_of(world_rank);
          return r >= 0 ? fmt::format("rank {}", r) : transport.describe_peer(world_rank);
        };
        throw MismatchError(fmt::format(
            "rank {}: collective #{} on {} does not match: {} called {} but {} called {}, as {} "
            "found{}",
            g_.rank, sequence, g_.name, name(f->culprit), describe(culprit, algo), name(f->finder),
            describe(finder, algo), name(f->finder),
            f->finder == peer(from) ? std::string() : fmt::format(" (rank {} passed it on)", from)));
      }
      throw MismatchError(fmt::format(
          "rank {}: collective #{} on {} does not match: {} called another collective than its "
          "peers, as rank {} found",
          g_.rank, sequence, g_.name, transport.describe_peer(mismatch_culprit), from));
    }
    case FailureReason::Interrupted:
      throw ConnectionError(
          fmt::format("rank {}: {} was asked to stop (a signal: SIGTERM or the like) during this "
                      "collective{}",
                      g_.rank, transport.describe_peer(failed_world_rank), as_reported));
    case FailureReason::DeviceError:
      throw ConnectionError(fmt::format(
          "rank {}: {} failed during this collective: its device failed (a CUDA error there, "
          "which its own error names){}",
          g_.rank, transport.describe_peer(failed_world_rank), as_reported));
    default:
      break;
  }
  if (earlier) {
    throw ConnectionError(fmt::format(
        "rank {}: {} failed, as rank {} reported (its connection to it broke during #{} on {})",
        g_.rank, transport.describe_peer(failed_world_rank), from, *earlier, g_.name));
  }
  throw ConnectionError(fmt::format(
      "rank {}: {} failed during this collective, as rank {} reported (its connection to it "
      "broke)",
      g_.rank, transport.describe_peer(failed_world_rank), from));
}

// A peer that left may have left because it ran another call, or failed on
// its own device and said so: such messages wait here or are on their way
// (perhaps over a connection still being set up), and they are the news.
// A peer that failed in an earlier call (its last messages to this rank were
// sent before it failed) told this rank under that call's tag, then left:
// its notice waits in the queue, and it is the news, not the closed
// connection.
void Diagnosis::explain_lost_connection(int with) {
  explain_departure(with, fmt::format("its connection to rank {} broke after that", with));
}

void Diagnosis::withdrawn(int from, const std::string& error) {
  explain_departure(from, fmt::format("it gave up its message to rank {} after that", g_.rank));
  failed_world_rank = peer(from);
  throw ConnectionError(fmt::format("{}; rank {} gave up this call and left no word of why", error,
                                    from));
}

void Diagnosis::explain_departure(int with, const std::string& after) {
  if (explained_) return;
  explained_ = true;
  auto& transport = g_.transport();
  const auto until = Clock::now() + kMismatchGrace;
  for (;;) {
    // Once this rank's own transport has failed the peer (its process
    // ended, its connection closed), everything the peer sent on them has
    // been taken in: a look at what is queued is the last one needed. (A
    // failure another rank reported comes before that, by a few
    // milliseconds; a killed rank's survivors then wait no longer.)
    const bool settled = !transport.failure_of(peer(with)).empty();
    check_queued();
    if (settled || Clock::now() >= until) break;
    // The call's claim keeps the background thread out: this thread reads
    // what is on its way itself (another rank's message of this call, say).
    transport.wait_any({}, std::chrono::milliseconds(10));
  }
  // Only this group's calls: a notice of another group (one that shares
  // this peer, its failed call's notice still queued) is no news of this one.
  for (const auto& [tag, theirs] : transport.queued_from(peer(with)))
    if (tag != tag_ && is_collective_of(tag, g_.slot) && is_failure_notice(theirs))
      reported_failure(theirs, with, sequence_of_tag(tag));
  // A rank that found a mismatch saved it before it dropped anything.
  if (auto saved = saved_mismatch(call_.sequence)) {
    second_hand = true;
    throw MismatchError(fmt::format("rank {}: {} ({})", g_.rank, *saved, after));
  }
  // A peer that failed said whom it blames before it did anything else
  // (blame()); if it then exited at once, its notice to this rank may have
  // died with the connection (unread data makes its kernel reset the link,
  // and the reset drops what this rank had not yet read).
  std::optional<keys::Blame> blamed;
  with_store(fmt::format("looking for rank {}'s blame", with), [&](store::Store& s) {
    if (const auto value = s.try_get(keys::blame(peer(with)), std::chrono::milliseconds(500)))
      blamed = keys::parse_blame(*value);
  });
  if (!blamed || blamed->blamed == peer(g_.rank) || blamed->blamed == peer(with)) return;
  failed_world_rank = blamed->blamed;
  // What rank `with` said of it (why the culprit failed: its device, a
  // timeout, a lost host): its first line.
  const auto said = blamed->said.substr(0, blamed->said.find('\n'));
  throw ConnectionError(fmt::format("rank {}: {} failed, as rank {} recorded before it left ({}){}",
                                    g_.rank, transport.describe_peer(failed_world_rank), with,
                                    after, said.empty() ? "" : "; it said: " + said));
}

void Diagnosis::size_mismatch(int from, const std::string& error) {
  // A rank that found a mismatch may have said so in a message of its own
  // call: its diagnosis is in the store.
  if (auto saved = saved_mismatch(call_.sequence)) {
    second_hand = true;
    throw MismatchError(fmt::format("rank {}: as rank {} found: {}", g_.rank, from, *saved));
  }
  throw MismatchError(
      fmt::format("{}; both ranks called {}, so they cut it into different segments: set "
                  "COLLIE_SEGMENT_BYTES alike on every rank",
                  error, describe(call_.signature(), true)));
}

void Diagnosis::save_mismatch(const std::string& what) const {
  with_store("saving the mismatch", [&](store::Store& s) {
    s.compare_set(keys::mismatch(g_.slot, call_.sequence), "", what, kStoreWait);
  });
}

void Diagnosis::save_stall_report() const {
  with_store("saving the stall report", [&](store::Store& s) {
    s.set(keys::stall_final(g_.slot, call_.sequence),
          fmt::format("{} {} {}", failed_world_rank, g_.rank, stall_.report()), kStoreWait);
  });
}

void Diagnosis::blame(const std::string& why) const {
  if (failed_world_rank < 0) return;
  with_store("saying whom the failure blames", [&](store::Store& s) {
    s.compare_set(keys::blame(peer(g_.rank)), "",
                  keys::blame_value(failed_world_rank,
                                    fmt::format("rank {}: {} #{} on {}: {}", peer(g_.rank),
                                                describe(call_.signature(), false),
                                                call_.sequence, g_.name, why.substr(0, 2000))),
                  kStoreWait);
  });
}

void Diagnosis::notify(const std::vector<int>& peers, std::uint64_t fingerprint,
                       std::uint64_t tag, const void* data, std::size_t bytes) {
  auto& transport = g_.transport();
  if (tag == 0) tag = tag_;
  const auto until = Clock::now() + std::chrono::seconds(1);
  std::vector<std::pair<transport::RequestPtr, int>> notices;
  for (int p : peers) {
    try {
      notices.emplace_back(transport.isend(peer(p), tag, data, bytes, fingerprint), p);
    } catch (const std::exception& e) {
      collie::log().debug("rank {}: telling rank {} about the failure: {}", g_.rank, p, e.what());
    }
  }
  for (const auto& [request, p] : notices) {
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      transport.wait(request, std::max(left, std::chrono::milliseconds(0)));
    } catch (const std::exception& e) {
      collie::log().debug("rank {}: telling rank {} about the failure: {}", g_.rank, p, e.what());
    }
  }
}

void Diagnosis::tell_peers(const collectives::Schedule& schedule, bool all) {
  if (failed_world_rank < 0) return;
  std::vector<int> peers;
  for (int p : schedule_peers(schedule))
    if (all || peer(p) != failed_world_rank) peers.push_back(p);
  notify(peers, failure_notice(failed_world_rank, failed_reason));
}

void Diagnosis::tell_mismatch(const collectives::Schedule& schedule) {
  // (A stray from an earlier call is no mismatch of this one: its sender
  // hears of it like everyone else.)
  const bool show = mismatched_from >= 0 && !second_hand && !stray;
  if (show) notify({mismatched_from}, fingerprint_);
  std::vector<int> peers;
  const int n = static_cast<int>(g_.members.size());
  if (n <= 64) {
    for (int p = 0; p < n; ++p)
      if (p != g_.rank && (p != mismatched_from || !show)) peers.push_back(p);
  } else {
    peers = schedule_peers(schedule);
  }
  const int culprit = mismatched_from >= 0 ? peer(mismatched_from) : peer(g_.rank);
  // What was found first, under the call's diagnosis tag: it is here when
  // the notice is (one peer's messages arrive in the order sent).
  if (finding.culprit >= 0) {
    sent_ = finding;
    notify(peers, 0, diagnosis_tag(g_.slot, call_.sequence), &sent_, sizeof sent_);
  }
  notify(peers, failure_notice(mismatch_culprit >= 0 ? mismatch_culprit : culprit,
                               FailureReason::Mismatch));
}

std::vector<int> Diagnosis::schedule_peers(const collectives::Schedule& schedule) {
  std::vector<int> peers;
  for (const auto& step : schedule.steps)
    for (const auto* list : {&step.sends, &step.recvs})
      for (const auto& t : *list)
        if (std::find(peers.begin(), peers.end(), t.peer) == peers.end()) peers.push_back(t.peer);
  return peers;
}

}  // namespace collie
