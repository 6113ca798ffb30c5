// Who moves the data (state.hpp): a thread that waits drives the rings
// itself, spinning a while (yielding where ranks outnumber cores) and then
// sleeping on its bell; the background thread moves data while nobody
// waits, so that an isend completes even if its wait comes late. Peers'
// liveness is looked at between turns.
#include <algorithm>
#include <bit>
#include <poll.h>
#include <sched.h>

#include <fmt/format.h>

#include <collie/coarse_clock.hpp>
#include <collie/host_cpus.hpp>
#include <collie/interrupt.hpp>

#include "bell.hpp"
#include "state.hpp"

namespace collie::transport {

using namespace std::chrono_literals;
using namespace shm;

namespace {

// The background thread leaves the rings to the callers until no request
// has finished for this long (as the TCP backend's).
constexpr auto kQuiet = 2ms;
// A sched_yield() that took this long ran another thread.
constexpr auto kYieldedAfter = std::chrono::microseconds(5);
constexpr auto kSharedSpin = 2ms;
// What one rank's turn of a round of yields costs, about (a switch between
// processes on this project's VM).
constexpr auto kYieldTurn = std::chrono::microseconds(1);
// How often the background thread looks whether peers are alive while a
// wait across backends sleeps in another one (watch_for()).
constexpr auto kWatchLiveness = 20ms;
// How often the background thread reads the machine's load (one read of
// /proc/loadavg: a few microseconds).
constexpr auto kLoadEvery = 50ms;

}  // namespace

// With the ready words (layout.hpp): the peers listed as sending, then
// those whose bit is set, and those left listed as reading.
bool ShmTransport::Impl::progress_ready() {
  bool moved = false;
  for (std::size_t i = 0; i < sending.size();) {
    auto& p = peer(sending[i]);
    if (p.state == PeerState::Ready) {
      if (!p.sends.empty()) moved = push(p) || moved;
      moved = collect_acks(p) || moved;
    }
    if (p.state == PeerState::Ready && !(p.sends.empty() && p.in_flight.empty())) {
      ++i;
      continue;
    }
    p.listed_sending = false;
    sending[i] = sending.back();
    sending.pop_back();
  }
  auto& h = mine.header();
  const std::size_t words = (local.size() + 63) / 64;
  for (std::size_t w = 0; w < words; ++w) {
    if (h.ready[w].load(std::memory_order_relaxed) == 0) continue;
    for (std::uint64_t bits = h.ready[w].exchange(0, std::memory_order_acquire); bits != 0;
         bits &= bits - 1) {
      auto& p = peer(local[w * 64 + static_cast<std::size_t>(std::countr_zero(bits))]);
      if (p.listed_reading) continue;
      p.listed_reading = true;
      reading.push_back(p.rank);
    }
  }
  for (std::size_t i = 0; i < reading.size();) {
    auto& p = peer(reading[i]);
    if (p.rank != options.rank && p.state != PeerState::Failed) {
      moved = pull(p) || moved;
      // Kept while its ring holds what this pass left (a message waiting
      // for room in the queue, one read in passes).
      if (p.state != PeerState::Failed &&
          (p.reading || p.in->head.load(std::memory_order_acquire) != p.in_tail)) {
        ++i;
        continue;
      }
    }
    p.listed_reading = false;
    reading[i] = reading.back();
    reading.pop_back();
  }
  return moved;
}

// (inline: every turn of a wait runs it; its callers are in this file.)
inline bool ShmTransport::Impl::progress_all() {
  if (use_ready) return progress_ready();
  bool moved = false;
  // Every ring into this mailbox is read, also from peers this rank has
  // not attached to yet: a message under a tag it waits for may come
  // from a rank it did not expect (a mismatch the executor must see).
  for (int rank : local) {
    auto& p = peer(rank);
    if (rank == options.rank || p.state == PeerState::Failed) continue;
    if (p.state == PeerState::Ready) {
      if (!p.sends.empty()) moved = push(p) || moved;
      moved = collect_acks(p) || moved;
    }
    moved = pull(p) || moved;
  }
  return moved;
}

bool ShmTransport::Impl::work_visible() {
  if (use_ready) {
    auto& h = mine.header();
    for (std::size_t w = 0; w < (local.size() + 63) / 64; ++w)
      if (h.ready[w].load(std::memory_order_acquire) != 0) return true;
    for (int rank : reading) {
      auto& p = peer(rank);
      if (p.in->head.load(std::memory_order_acquire) != p.in_tail && !p.paused) return true;
    }
    for (int rank : sending) {
      auto& p = peer(rank);
      if (p.state != PeerState::Ready) continue;
      if (!p.sends.empty() && p.out_head - p.out->tail.load(std::memory_order_acquire) < ring_bytes)
        return true;
      if (!p.in_flight.empty() && p.out->acked.load(std::memory_order_acquire) != p.acks_seen)
        return true;
    }
    return false;
  }
  for (int rank : local) {
    auto& p = peer(rank);
    if (rank == options.rank || p.state == PeerState::Failed) continue;
    if (p.in->head.load(std::memory_order_acquire) != p.in_tail && !p.paused) return true;
    if (p.state != PeerState::Ready) continue;
    if (!p.sends.empty() &&
        p.out_head - p.out->tail.load(std::memory_order_acquire) < ring_bytes)
      return true;
    if (!p.in_flight.empty() && p.out->acked.load(std::memory_order_acquire) != p.acks_seen)
      return true;
  }
  return false;
}

void ShmTransport::Impl::check_liveness() {
  // pull() stops after each receive it completes (its waiter may post the
  // next); before a peer is failed, every message it wrote whole must be
  // taken in: the receives posted, and the rest queued.
  const auto drain = [this](Peer& p) {
    while (pull(p)) {
    }
  };
  for (int rank : attached) {
    auto& p = peer(rank);
    if (p.state == PeerState::Departed) {
      drain(p);
      if (p.state == PeerState::Departed &&
          p.in->head.load(std::memory_order_acquire) == p.in_tail) {
        const std::string why = p.failure;
        fail_peer(p, p.failure_kind, why);
      }
      continue;
    }
    if (p.state != PeerState::Ready) continue;
    pollfd f{p.pidfd, POLLIN, 0};
    const bool gone = ::poll(&f, 1, 0) > 0;
    const bool closed = p.theirs->header().closed.load(std::memory_order_acquire) != 0;
    const bool broken = p.in->broken.load(std::memory_order_acquire) != 0 ||
                        p.out->broken.load(std::memory_order_acquire) != 0;
    if (!gone && !closed && !broken) continue;
    drain(p);  // what it sent before it went
    if (p.state != PeerState::Ready) continue;
    if (broken && !gone && !closed) {
      fail_peer(p, ErrorKind::Connection,
                fmt::format("{} gave up on its shared-memory channel with this rank (a send "
                            "timed out half-way through a message it could not withdraw)",
                            describe_peer(rank)));
    } else if (gone) {
      fail_peer(p, ErrorKind::Connection,
                fmt::format("{} is gone: its process ended (it exited or was killed)",
                            describe_peer(rank)));
    } else {
      fail_peer(p, ErrorKind::Connection,
                fmt::format("{} closed its transport (its group was destroyed or its process "
                            "is ending)",
                            describe_peer(rank)));
    }
  }
}

ShmTransport::Impl::Clock::duration ShmTransport::Impl::wait_spin() const {
  // Where ranks crowd a processor so thickly that one round of their
  // yields takes longer than the spin, a wait yields once and sleeps: at
  // 256 ranks on 2 cores (128 a processor), 8 B all_reduce took 2.2 ms so
  // against 3.1 with the spin (and 3.3 sleeping at once, with no yield);
  // at 64 ranks the spin still paid (0.57-0.63 ms against 0.64-0.70).
  if (crowded.load(std::memory_order_relaxed) &&
      per_processor.load(std::memory_order_relaxed) * kYieldTurn > options.settings.spin)
    return Clock::duration::zero();
  return Clock::duration(options.settings.spin);
}

void ShmTransport::Impl::sleep_on_bell(std::chrono::microseconds d) {
  auto& h = mine.header();
  h.sleepers.fetch_add(1, std::memory_order_seq_cst);
  const std::uint32_t seen = h.bell.load(std::memory_order_acquire);
  bool work = false;
  {
    std::lock_guard lock(mu);
    work = work_visible();
  }
  if (!work) futex_wait(h.bell, seen, d);
  h.sleepers.fetch_sub(1, std::memory_order_relaxed);
}

// Moves data until finished() or `timeout` has passed (the clock is read
// only once the request is found unfinished: a small collective's waits
// mostly find it done).
template <class Finished>
bool ShmTransport::Impl::drive(const Finished& finished, std::chrono::milliseconds timeout) {
  if (finished()) return true;
  ++waiters;
  struct Leave {
    std::atomic<int>& w;
    ~Leave() { --w; }
  } leave{waiters};
  const auto began = Clock::now();
  const auto deadline = began + timeout;
  auto now = began;
  const bool crowd = crowded.load(std::memory_order_relaxed);
  const auto spin = wait_spin();
  auto spin_until = began + spin;
  const auto spin_limit = began + std::max<Clock::duration>(spin, kSharedSpin);
  auto next_check = began + kLivenessEvery;
  // A wait with no time left still moves what is ready, once (a caller
  // that waits on several backends in turn polls each so).
  bool once = deadline <= began;
  unsigned turn = 0;
  // A busy machine with ranks crowding its processors, or with this rank
  // on the processor where another of the host's ranks last waited: no
  // spin and no yield, straight to the bell (a sched_yield() there hands
  // the processor to the other work for a whole time slice, milliseconds,
  // before this rank gets to sleep). Measured with six processes spinning
  // on 2 cores, 8 B all_reduce, 5 rounds: a spin of 5 or 20 us first, or
  // one for as long as a peer is seen spinning too, was no faster on 2
  // ranks and slower on 4. Where each rank has a processor of its own
  // (bound, as `collie launch` binds 2 ranks on 2 processors), the spin
  // pays even so, as the board's does: asleep, a bound rank's wake-up
  // waits behind the other work on its one processor (32 KiB all_reduce
  // on 2 bound ranks beside six spinning processes: 180 us sleeping,
  // against 4-11 us).
  const bool sleepy = busy.load(std::memory_order_relaxed) && (crowd || processor_shared());
  // A thread that waits for another thread of its process yields as a
  // crowded one does (transport.hpp, set_waits_for_others).
  const bool yielding = !sleepy && (crowd || waits_for_others());
  for (bool first = true; !finished(); first = false) {
    if (!first) now = Clock::now();
    if ((now >= deadline && !once) || waits_interrupted() != 0) break;
    std::unique_lock drive_lock(drive_mu, std::try_to_lock);
    if (!drive_lock.owns_lock()) {
      if (once) break;  // another thread drives
      // Another thread drives (the background thread, a moment, or
      // another waiter): yield while spinning, then sleep until a
      // request finishes.
      if (now < spin_until && !sleepy) {
        sched_yield();
        continue;
      }
      std::unique_lock lock(done_mu);
      done_cv.wait_for(lock, 1ms);
      continue;
    }
    // Spinning: reading the rings costs a few loads, so the turn is
    // short. Where every rank of the host has a core, it neither yields
    // nor reads the clock every turn (both cost more than the turn);
    // where ranks outnumber cores, it yields each turn so that the rank
    // it waits for runs.
    for (;;) {
      bool moved = false;
      {
        std::lock_guard lock(mu);
        moved = progress_all();
        if (now >= next_check) {
          next_check = now + kLivenessEvery;
          check_liveness();
        }
      }
      if (finished() || once) return finished();
      if (moved) {
        spin_until = std::max(spin_until, now + spin);
      } else if (sleepy) {
        break;  // to the bell
      } else if (yielding) {
        sched_yield();
        const auto after = Clock::now();
        if (after - now > kYieldedAfter)
          spin_until = std::min(spin_limit, std::max(spin_until, after + spin));
        now = after;
      } else {
        cpu_relax();
      }
      if (yielding || (++turn & 15) == 0) {
        if (!yielding) now = Clock::now();
        if (now >= deadline || waits_interrupted() != 0) return finished();
        if (now >= spin_until) break;
      }
    }
    now = Clock::now();
    const auto until = std::min({deadline, next_check});
    if (until > now) {
      drive_lock.unlock();
      sleep_on_bell(std::chrono::duration_cast<std::chrono::microseconds>(until - now) + 1us);
    }
  }
  return finished();
}

std::uint32_t ShmTransport::Impl::note_processor() {
  const auto cpu = static_cast<std::uint32_t>(sched_getcpu() + 1);  // 0: not known
  if (auto& mine_cpu = mine.header().cpu; mine_cpu.load(std::memory_order_relaxed) != cpu)
    mine_cpu.store(cpu, std::memory_order_relaxed);
  return cpu;
}

bool ShmTransport::Impl::processor_shared() {
  const auto cpu = note_processor();
  if (cpu == 0) return false;  // as the board: a processor not known is not shared
  const auto now = CoarseClock::now();
  std::lock_guard lock(mu);
  if (cpu == shared_cpu && now < shared_until) return shared_answer;
  bool shared = false;
  for (int rank : local) {
    const Peer& p = peer(rank);
    if (rank != options.rank && p.theirs != nullptr &&
        p.theirs->header().cpu.load(std::memory_order_relaxed) == cpu) {
      shared = true;
      break;
    }
  }
  shared_cpu = cpu;
  shared_answer = shared;
  shared_until = now + kLivenessEvery;
  return shared;
}

void ShmTransport::Impl::watch_turn(std::uint32_t idle_seen) {
  const auto now = Clock::now();
  bool moved = false;
  {
    std::unique_lock drive_lock(drive_mu, std::try_to_lock);
    if (!drive_lock.owns_lock()) {
      // A caller drives the rings a moment (a wait of its own, or the
      // watcher polling between its sleeps): look again soon.
      futex_wait(idle_word, idle_seen, 200us);
      return;
    }
    std::lock_guard lock(mu);
    while (progress_all())
      moved = true;
    if (now >= next_liveness) {
      next_liveness = now + kWatchLiveness;
      check_liveness();  // a peer failed fails requests: the watcher looks
      moved = true;
    }
  }
  if (moved) {
    std::lock_guard lock(watch_mu);
    for (const auto& [serial, wake] : watches)
      wake();
  }
  const auto until = std::min(next_liveness, Clock::now() + kWatchLiveness);
  if (watching.load() > 0 && !stopping.load())
    sleep_on_bell(std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now()) +
                  1us);
}

void ShmTransport::Impl::look_at_load(Clock::time_point now) {
  // The first look after kLoadEvery, and busy only on two looks in a row:
  // a job's start (every rank initialising at once) and a moment's load
  // are not other work that stays.
  if (next_load == Clock::time_point{}) next_load = now + kLoadEvery;
  if (now < next_load) return;
  next_load = now + kLoadEvery;
  const int ranks = std::max(machine_ranks.load(std::memory_order_relaxed),
                             static_cast<int>(local.size()));
  const bool now_busy = machine_busy(runnable_tasks(), ranks, online_cpus());
  busy_looks = now_busy ? busy_looks + 1 : 0;
  busy.store(busy_looks >= 2, std::memory_order_relaxed);
}

void ShmTransport::Impl::background_loop() {
  // The callers' last finished request, as this thread saw it: it stays
  // out until they have been quiet for kQuiet, counted from its start (a
  // job's first calls come at once).
  std::uint64_t seen_done = done_count.load(std::memory_order_relaxed);
  auto seen_at = Clock::now();
  while (!stopping.load()) {
    look_at_load(Clock::now());
    // Read first: a watch begun after this wakes the sleep below at once.
    const std::uint32_t idle_seen = idle_word.load();
    if (watching.load() > 0) {
      watch_turn(idle_seen);
      continue;
    }
    const auto now = Clock::now();
    if (const auto done = done_count.load(std::memory_order_relaxed); done != seen_done) {
      seen_done = done;
      seen_at = now;
    }
    const auto quiet_from = seen_at + kQuiet;
    if (waiters.load() == 0 && now >= quiet_from) {
      std::unique_lock drive_lock(drive_mu, std::try_to_lock);
      if (drive_lock.owns_lock()) {
        std::lock_guard lock(mu);
        while (progress_all()) {
        }
        if (now >= next_liveness) {
          next_liveness = now + 100ms;
          check_liveness();
        }
      }
      if (stopping.load()) break;
      sleep_on_bell(50ms);
    } else {
      // Callers move the data now: sleep until they have been quiet for
      // kQuiet, or, while they wait, for a while (never on done_cv: it
      // is notified at every finished request).
      const auto d = waiters.load() == 0
                         ? std::chrono::duration_cast<std::chrono::microseconds>(quiet_from - now)
                         : std::chrono::microseconds(20ms);
      futex_wait(idle_word, idle_seen, std::max(d, std::chrono::microseconds(100)));
    }
  }
}

bool ShmTransport::Impl::drive_until_done(const ShmRequest& r, std::chrono::milliseconds timeout) {
  return drive([&r] { return !r.pending(); }, timeout);
}

int ShmTransport::Impl::drive_until_any(std::span<const RequestPtr> requests,
                                        std::chrono::milliseconds timeout) {
  int found = -1;
  drive([&] { return (found = first_finished(requests)) >= 0; }, timeout);
  return found;
}

}  // namespace collie::transport
