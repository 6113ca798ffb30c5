// Why a call failed, told alike on every rank it touches (docs/failures.md):
// one call's failure diagnosis, kept apart from the loops that move its data.
//
// - A message of another call (its fingerprint, call.hpp) is a mismatch:
//   the first rank to see one saves its diagnosis in the store
//   (keys::mismatch) before it tells anyone, so every rank can quote it.
// - A failed rank tells its peers with failure notices (0-byte messages
//   whose fingerprint names the rank at fault and why), and first says in
//   the store whom it blames (keys::blame), for `collie launch`'s summary and
//   for peers whose connection to it broke before its notice came.
// - A broken connection is explained, when it can be, by what the peer
//   left: a notice queued under another call's tag, a saved mismatch, its
//   blame record.
// - A rank that tells its peers of a mismatch also sends each, first, what
//   it found (Finding: both calls and both ranks, under the call's diagnosis
//   tag, tags.hpp): a peer whose store is gone (rank 0 hosted it and
//   exited) still names both calls.
// Used by the thread running the call (CallRun's).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <collie/collectives/schedule.hpp>
#include <collie/store/store.hpp>

#include "group/call.hpp"
#include "group/group.hpp"
#include "watch/stall.hpp"

namespace collie {

// A wait's TimeoutError text `what`, said as the call's: how long it
// waited, its timeout and where that comes from, and the stall inspector's
// `report` if it made one.
std::string call_timeout_text(const std::string& what, std::chrono::milliseconds waited,
                              std::chrono::milliseconds timeout, const std::string& report);

class Diagnosis {
 public:
  Diagnosis(detail::Group& g, const Call& call, std::uint64_t tag, std::uint64_t fingerprint,
            const StallCheck& stall);

  // ---- finding the news (they throw the error that tells it) ----

  // A message from group rank `from` carried `theirs`, not this call's
  // fingerprint: "rank 2: collective #7 on world does not match: ...".
  std::string mismatch(int from, std::uint64_t theirs) const;
  // Looks at messages under this call's tag that no receive asked for:
  // another call's fingerprint is a mismatch (checked first: it is the
  // cause), a failure notice is news of a dead rank. Then check_stray().
  void check_queued();
  // Messages under the tags of the group's last few calls, which ended
  // here: no receive will take them. Looked at when a call starts, between
  // its waits and when it ends (one atomic load when nothing is queued).
  void check_stray();
  // Group rank `from`, whose message this call waits for, wrote another
  // call of this number on the group's board (board_call.hpp): throws the
  // MismatchError naming both. Nothing where the group has no board.
  void check_board(int from);
  // Group rank `from` sent a failure notice (in the group's earlier call
  // #`earlier`, if given: it left after it). Throws what it says.
  [[noreturn]] void reported_failure(std::uint64_t notice, int from,
                                     std::optional<std::uint64_t> earlier = std::nullopt);
  // A connection to group rank `with` broke: looks a moment for the news
  // that explains it (throws it), once per call; returns if there is none.
  void explain_lost_connection(int with);
  // Group rank `from` withdrew its message of this call part-way (it gave
  // the call up: shared memory, error the WithdrawnError's text): throws the
  // news that explains it, else a ConnectionError that names rank `from`.
  [[noreturn]] void withdrawn(int from, const std::string& error);
  // A receive's size differed from what group rank `from` sent, and its
  // fingerprint was this call's: throws the MismatchError that says why.
  [[noreturn]] void size_mismatch(int from, const std::string& error);
  // The diagnosis another rank saved for call #`sequence`, if any.
  std::optional<std::string> saved_mismatch(std::uint64_t sequence) const;

  // ---- telling it (after the call failed; never throws) ----

  // Saves this rank's mismatch diagnosis in the store (the first one stays).
  void save_mismatch(const std::string& what) const;
  // Saves the stall inspector's finding for the peers this rank's timeout
  // will tell, blaming `failed_world_rank`.
  void save_stall_report() const;
  // Says in the store whom this rank's failure blames (its first only).
  void blame(const std::string& why) const;
  // Sends `fingerprint` in a message of `bytes` at `data` (none by default)
  // under `tag` (the call's own by default) to each of `peers` (group
  // ranks): all posted at once, then one second in all to hand them over.
  void notify(const std::vector<int>& peers, std::uint64_t fingerprint, std::uint64_t tag = 0,
              const void* data = nullptr, std::size_t bytes = 0);
  // Tells every peer of the schedule but the failed rank (unless `all`)
  // which rank failed.
  void tell_peers(const collectives::Schedule& schedule, bool all = false);
  // After a MismatchError: the rank whose message did not match gets this
  // rank's call (so it sees the mismatch itself), the others a notice.
  void tell_mismatch(const collectives::Schedule& schedule);
  // The group ranks this rank's schedule sends to or receives from.
  static std::vector<int> schedule_peers(const collectives::Schedule& schedule);

  // ---- what is known ----

  int failed_world_rank = -1;  // whose connection failed (seen here or reported)
  FailureReason failed_reason = FailureReason::ConnectionLost;
  int mismatched_from = -1;    // the group rank whose message did not match
  bool second_hand = false;    // the mismatch was found by another rank
  bool stray = false;          // it was found in an earlier call (check_stray)
  int mismatch_culprit = -1;   // the world rank it named (second-hand)
  // A mismatch as its finder saw it: what the culprit called, and what the
  // finder did (world ranks, fingerprints). culprit < 0: none known.
  struct Finding {
    std::int32_t culprit = -1;
    std::int32_t finder = -1;
    std::uint64_t culprit_call = 0;
    std::uint64_t finder_call = 0;
  };
  Finding finding;
  // This rank found a mismatch itself: group rank `from` sent `theirs`
  // where this rank's call is `mine`.
  void found(int from, std::uint64_t theirs, std::uint64_t mine);

 private:
  int peer(int group_rank) const { return g_.members[static_cast<std::size_t>(group_rank)]; }
  // Group rank `with` left this call (`after`: how, "its connection to
  // rank 2 broke after that"): looks a moment for the news (throws it),
  // once per call; returns if there is none.
  void explain_departure(int with, const std::string& after);
  // The group rank of world rank `world_rank`; -1 if not a member.
  int group_rank_of(int world_rank) const;
  // What group rank `from` found, sent ahead of its mismatch notice for
  // call #`sequence`, if it is here (it came before the notice).
  std::optional<Finding> forwarded_finding(int from, std::uint64_t sequence);

  detail::Group& g_;
  const Call& call_;
  std::uint64_t tag_;
  std::uint64_t fingerprint_;
  const StallCheck& stall_;
  bool explained_ = false;  // explain_lost_connection() has looked
  // Runs `use` on the job's store, best-effort (`what` names it in the
  // debug log when it fails): once one such call timed out (a store gone
  // silent with a lost host), the others are not tried, so a failure's
  // diagnosis costs one wait, not one per read. False when skipped or failed.
  bool with_store(std::string_view what, const std::function<void(store::Store&)>& use) const;
  mutable bool store_silent_ = false;
  Finding sent_;            // what tell_mismatch() sends: alive until the sends are done
};

}  // namespace collie
