// Groups' boards over shared memory (board.hpp): a member's entries are in
// its own mailbox's board page (layout.hpp), two per tag space; the others
// read them where they lie. A waiting member spins as a wait on the rings
// does (ShmTransport::Impl::wait_spin()), then sleeps on its bell, which a
// member rings after it wrote its entry when somebody sleeps there.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>
#include <sched.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>
#include <collie/interrupt.hpp>

#include "bell.hpp"
#include "state.hpp"

namespace collie::transport {

using namespace std::chrono_literals;
using namespace shm;

static_assert(Board::kBytes <= kBoardPayload);

class ShmBoard final : public Board {
 public:
  using Clock = ShmTransport::Impl::Clock;

  ShmBoard(ShmTransport::Impl& m, std::vector<int> members, std::size_t me, std::uint32_t space)
      : m_(m), members_(std::move(members)), me_(me) {
    entries_.reserve(members_.size());
    for (int rank : members_) {
      const Mapping& box = rank == m_.options.rank ? m_.mine : *m_.peer(rank).theirs;
      entries_.push_back({&box.board().entries[space][0], &box.board().entries[space][1]});
      headers_.push_back(&box.header());
      if (rank != m_.options.rank) bells_.push_back(&box.header());
    }
  }

  void exchange(std::uint64_t ticket, std::uint64_t sequence, std::uint64_t fingerprint,
                std::span<const std::byte> mine, std::chrono::milliseconds timeout,
                BoardLook look) override {
    if (mine.size() > kBytes)
      throw ArgumentError(fmt::format("rank {}: a board entry holds at most {} bytes, not {}",
                                      m_.options.rank, kBytes, mine.size()));
    parity_ = ticket & 1;
    const std::uint64_t want = ticket + 1;
    auto& own = *entries_[me_][parity_];
    // (Its ticket 0 while it changes: posted() reads it as a seqlock.)
    own.ticket.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    if (!mine.empty()) std::memcpy(own.payload, mine.data(), mine.size());
    own.fingerprint.store(fingerprint, std::memory_order_relaxed);
    own.sequence.store(sequence, std::memory_order_relaxed);
    own.ticket.store(want, std::memory_order_release);
    // The members asleep on their bells (bell.hpp: one fence for them all).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (MailboxHeader* h : bells_) {
      if (h->sleepers.load(std::memory_order_relaxed) == 0) continue;
      h->bell.fetch_add(1, std::memory_order_release);
      futex_wake(h->bell);
    }
    // Activity, as a finished request is: the background thread stays out.
    m_.note_activity();
    next_ = 0;
    if (arrived(want)) return;
    try {
      wait(want, timeout, look);
    } catch (...) {
      // Withdrawn: a member that comes late does not finish a call this
      // one gave up (it waits, and hears why from the notices).
      own.ticket.store(0, std::memory_order_release);
      throw;
    }
  }

  const std::byte* entry(std::size_t index) const override {
    return entries_[index][parity_]->payload;
  }
  std::uint64_t fingerprint(std::size_t index) const override {
    return entries_[index][parity_]->fingerprint.load(std::memory_order_relaxed);
  }
  std::optional<std::uint64_t> posted(std::size_t index, std::uint64_t sequence) const override {
    for (const BoardEntry* e : entries_[index]) {
      // Read between two reads of its ticket: an entry rewritten meanwhile
      // is not taken.
      const auto ticket = e->ticket.load(std::memory_order_acquire);
      if (ticket == 0 || e->sequence.load(std::memory_order_relaxed) != sequence) continue;
      const auto print = e->fingerprint.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (e->ticket.load(std::memory_order_relaxed) == ticket) return print;
    }
    return std::nullopt;
  }

 private:
  // Whether every member's entry holds `want`; members found so are not
  // read again (next_).
  // Whether member i's entry for this exchange is in.
  bool entered(std::size_t i, std::uint64_t want) const {
    return entries_[i][parity_]->ticket.load(std::memory_order_acquire) == want;
  }

  bool arrived(std::uint64_t want) {
    for (; next_ < members_.size(); ++next_) {
      if (next_ == me_) continue;
      if (!entered(next_, want)) return false;
    }
    return true;
  }

  void wait(std::uint64_t want, std::chrono::milliseconds timeout, BoardLook look) {
    // Where this rank runs, for members that wait (written when it moved;
    // a call that waits not at all costs no look).
    cpu_ = m_.note_processor();
    // Crowded processors yield while they spin, and sleep at once where
    // other work fills the machine too, as a wait on the rings does
    // (progress.cpp). Where each rank has a processor but other work fills
    // them (busy, not crowded), a board wait still spins, as a wait on the
    // rings does there: the members' entries come while both run, and a sleep
    // costs a wake-up behind the other work every call. 2 ranks, 8 B, six
    // processes spinning on 2 cores, 50,000 calls: 15-43 us a call
    // sleeping, 4-9 us spinning 50 us first (Open MPI, which spins: 1.6-3.5).
    // (The clock is read first after 16 turns where the spin does not
    // yield: most small calls find their entries by then.)
    const bool crowd = m_.crowded.load(std::memory_order_relaxed);
    const bool sleepy = (crowd && m_.busy.load(std::memory_order_relaxed)) || shares_processor();
    const bool yielding = (crowd || waits_for_others()) && !sleepy;
    const auto spin = sleepy ? Clock::duration::zero() : m_.wait_spin();
    Clock::time_point began{}, spin_until{};
    if (sleepy || yielding) {
      began = Clock::now();
      spin_until = began + spin;
    }
    for (unsigned turn = 1; !sleepy; ++turn) {
      if (yielding) {
        sched_yield();
      } else {
        cpu_relax();
      }
      if (arrived(want)) return;
      if (!yielding && (turn & 15) != 0) continue;
      const auto now = Clock::now();
      if (began == Clock::time_point{}) {
        began = now;
        spin_until = now + spin;
      }
      if (now >= spin_until) break;
    }
    const auto deadline = began + timeout;
    auto& h = m_.mine.header();
    auto next_look = began + kLivenessEvery;
    for (;;) {
      h.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const std::uint32_t seen = h.bell.load(std::memory_order_acquire);
      if (!arrived(want)) {
        const auto until = std::min(deadline, next_look);
        const auto now = Clock::now();
        if (until > now)
          futex_wait(h.bell, seen,
                     std::chrono::duration_cast<std::chrono::microseconds>(until - now) + 1us);
      }
      h.sleepers.fetch_sub(1, std::memory_order_relaxed);
      if (arrived(want)) return;
      const auto now = Clock::now();
      if (now >= next_look) {
        next_look = now + kLivenessEvery;
        look();
        check_members(want);
      }
      if (const int signal = waits_interrupted(); signal != 0 || now >= deadline)
        throw_failure(ErrorKind::Timeout,
                      timeout_text(fmt::format("rank {}: a small call on its group's board",
                                               m_.options.rank),
                                   missing(want), signal != 0 ? 0ms : timeout, signal),
                      signal != 0);
    }
  }

  // Whether a member whose entry is missing last ran where this rank runs
  // now: spinning would keep it from its processor (unbound ranks on a
  // busy machine meet so).
  bool shares_processor() const {
    if (cpu_ == 0) return false;
    for (std::size_t i = next_; i < members_.size(); ++i)
      if (i != me_ && headers_[i]->cpu.load(std::memory_order_relaxed) == cpu_) return true;
    return false;
  }

  // Throws ConnectionError naming every missing member whose process ended
  // or who closed its transport (the first one's kind of failure): where one
  // left because another was gone, both are named. A member writes its
  // entry before it can end, so the entries are read again once the
  // departures are: one that wrote its entry and left since this rank last
  // looked (the last rank through a barrier, which then exits) is not
  // missing.
  void check_members(std::uint64_t want) {
    std::lock_guard lock(m_.mu);
    m_.check_liveness();
    if (arrived(want)) return;
    std::vector<std::string> gone;
    std::optional<ErrorKind> kind;
    for (std::size_t i = next_; i < members_.size(); ++i) {
      if (i == me_ || entered(i, want)) continue;
      const auto& p = m_.peer(members_[i]);
      if (p.state != PeerState::Failed && p.state != PeerState::Departed) continue;
      if (!kind) kind = p.failure_kind;
      gone.push_back(p.failure);
    }
    if (kind)
      throw_failure(*kind,
                    fmt::format("rank {}: a small call on its group's board: {}", m_.options.rank,
                                fmt::join(gone, "; ")),
                    false);
  }

  // "no entry yet from rank 2 (shared memory), rank 3 (shared memory)".
  std::string missing(std::uint64_t want) const {
    std::vector<std::string> who;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      if (i == me_) continue;
      if (!entered(i, want))
        who.push_back(m_.describe_peer(members_[i]));
    }
    return fmt::format("no entry yet from {}", fmt::join(who, ", "));
  }

  ShmTransport::Impl& m_;
  const std::vector<int> members_;  // ranks, in the group's order
  const std::size_t me_;            // this rank's index among them
  std::vector<std::array<BoardEntry*, 2>> entries_;
  std::vector<MailboxHeader*> headers_;  // every member's, in order
  std::vector<MailboxHeader*> bells_;    // the other members'
  std::uint32_t cpu_ = 0;                // 1 + where it last waited
  std::size_t parity_ = 0;             // of the last exchange
  std::size_t next_ = 0;               // members before it (but this one) have written
};

std::unique_ptr<Board> ShmTransport::open_board(std::span<const int> members,
                                                std::uint32_t space) {
  auto& m = *impl_;
  if (members.size() < 2 || members.size() > Board::kMostMembers || space >= Board::kSpaces)
    return nullptr;
  std::size_t me = members.size();
  for (std::size_t i = 0; i < members.size(); ++i) {
    const int rank = members[i];
    if (rank == m.options.rank) {
      me = i;
      continue;
    }
    if (rank < 0 || rank >= m.options.world_size || !m.peer(rank).local) return nullptr;
  }
  if (me == members.size()) return nullptr;
  for (int rank : members) {
    if (rank == m.options.rank) continue;
    // (Attached already, as every peer a message went to: a moment.)
    auto lock = m.lock_reached(rank, "open a board with");
    const auto& p = m.peer(rank);
    if (p.state != PeerState::Ready)
      throw_failure(p.failure_kind,
                    fmt::format("rank {}: a board for its group: {}", m.options.rank, p.failure),
                    false);
  }
  return std::make_unique<ShmBoard>(m, std::vector<int>(members.begin(), members.end()), me,
                                    space);
}

}  // namespace collie::transport
