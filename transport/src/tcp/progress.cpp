// Who polls the sockets: the waiting thread or the background thread
// (progress.hpp).
#include "progress.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sched.h>
#include <thread>

#include <collie/deadline.hpp>
#include <collie/interrupt.hpp>
#include <collie/log.hpp>

namespace collie::transport::tcp {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {
constexpr int kWake = -1;  // `who` of the wake eventfd in a poll set
// A sched_yield() that took this long ran another thread.
constexpr auto kYieldedAfter = std::chrono::microseconds(5);
// How long a wait may spin in all while its yields run other threads.
constexpr auto kSharedSpin = std::chrono::milliseconds(2);
// A wait spins on while a request finished less than this long ago...
constexpr auto kActiveSpin = std::chrono::milliseconds(2);
// ...for at most this long in all.
constexpr auto kActiveSpinMax = std::chrono::milliseconds(100);
// At most this many peers are read directly, without poll(), while spinning.
constexpr std::size_t kDirectPeers = 1;
}  // namespace

// A lane's `who` in a poll set: past the ranks, by lane (sending lanes
// first, then receiving ones, kMaxLanes of each).
namespace {
int lane_who(int rank, int world, std::size_t slot) {
  return rank + world * (1 + static_cast<int>(slot));
}
}  // namespace

bool Progress::add_peers(std::vector<pollfd>& fds, std::vector<int>& who,
                         Clock::time_point& rest_until) {
  const int world = table_.opt.world_size;
  bool lanes = false;
  rest_until = Clock::time_point::max();
  for (int rank : table_.connected) {
    auto& p = table_.peer(rank);
    if (p.state != PeerState::Ready) continue;
    short events = 0;
    const bool reading = p.rx != Rx::Paused && p.rx != Rx::Striped;
    if (reading) events |= POLLIN;
    if (p.wants_to_write()) events |= POLLOUT;
    // A connection not read now (paused, or waiting on its lanes) is
    // watched all the same, for no event: poll() reports its error or
    // hang-up regardless (keep-alive's verdict on a host gone).
    if (events != 0 || p.rx == Rx::Striped || p.rx == Rx::Paused) {
      fds.push_back({p.fd(), events, 0});
      who.push_back(p.rank);
    }
    const int streams = table_.streams.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < p.out_lanes.size(); ++i) {
      // A lane past `streams` takes no new chunk (set_streams() asked for
      // fewer), nor does a resting one (lane_rests()) until its rest ends.
      const auto& lane = *p.out_lanes[i];
      if (!p.lane_wants_to_write(lane)) continue;
      const bool mid_chunk = lane.request != nullptr ||
                             (lane.sealed && lane.sealed->out_begin < lane.sealed->out_end);
      if (!mid_chunk && lane.number > streams) continue;
      if (!mid_chunk && lane.rest_until > Clock::time_point{} && lane.rest_until > Clock::now()) {
        rest_until = std::min(rest_until, lane.rest_until);
        continue;
      }
      fds.push_back({p.out_lanes[i]->fd(), POLLOUT, 0});
      who.push_back(lane_who(rank, world, i));
      lanes = true;
    }
    for (std::size_t i = 0; i < p.in_lanes.size(); ++i) {
      if (p.in_lanes[i]->lost) continue;  // shut down (lane_failover.cpp)
      // A waiting lane is not read, only watched (as above).
      fds.push_back({p.in_lanes[i]->fd(), p.in_lanes[i]->waiting ? short{0} : short{POLLIN}, 0});
      who.push_back(lane_who(rank, world, wire::kMaxLanes + i));
      lanes = true;
    }
  }
  return lanes;
}

void Progress::service(const std::vector<pollfd>& fds, const std::vector<int>& who) {
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (who[i] < 0 || fds[i].revents == 0) continue;
    const int world = table_.opt.world_size;
    if (who[i] >= world) {  // a lane
      auto& p = table_.peer(who[i] % world);
      if (p.state != PeerState::Ready) continue;
      const auto slot = static_cast<std::size_t>(who[i] / world - 1);
      if (fds[i].events == 0) {  // watched, not read: only an error or hang-up reports
        const auto in = slot - wire::kMaxLanes;
        if (slot >= wire::kMaxLanes && in < p.in_lanes.size() &&
            p.in_lanes[in]->fd() == fds[i].fd)
          p.socket_failed(fds[i].fd, p.in_lanes[in].get());
        continue;
      }
      if (slot < wire::kMaxLanes) {
        if (slot < p.out_lanes.size() && p.out_lanes[slot]->fd() == fds[i].fd)
          p.flush_lane(*p.out_lanes[slot]);
      } else if (const auto in = slot - wire::kMaxLanes;
                 in < p.in_lanes.size() && p.in_lanes[in]->fd() == fds[i].fd) {
        p.receive_lane(*p.in_lanes[in]);
      }
      continue;
    }
    auto& p = table_.peer(who[i]);
    if (p.state != PeerState::Ready || p.fd() != fds[i].fd) continue;
    if (fds[i].events == 0) {
      p.socket_failed(fds[i].fd, nullptr);
      continue;
    }
    if (fds[i].revents & POLLOUT) p.flush();
    if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) p.receive();
  }
}

void Progress::drive_once(int timeout_ms, std::vector<pollfd>& fds, std::vector<int>& who) {
  fds.clear();
  who.clear();
  fds.push_back({table_.driver_wake.fd(), POLLIN, 0});
  who.push_back(kWake);
  auto rest_until = Clock::time_point::max();
  {
    std::lock_guard lock(table_.mu);
    const bool lanes = add_peers(fds, who, rest_until);
    // Spinning over one peer: serve it as if poll() had found it ready. A
    // read that finds nothing costs one system call, as poll() does, and
    // one that finds the bytes needs no second. (The wake-up fd is left
    // for the next poll() that sleeps.)
    // (Never with lanes: a lane takes a chunk only when poll() says it drained.)
    if (timeout_ms == 0 && !lanes && fds.size() <= 1 + kDirectPeers) {
      for (std::size_t i = 1; i < fds.size(); ++i)
        fds[i].revents = fds[i].events;
      service(fds, who);
      return;
    }
  }
  // A resting lane is looked at again when its rest ends.
  if (rest_until != Clock::time_point::max())
    timeout_ms = std::min(timeout_ms, poll_ms_until(rest_until));
  const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
  if (ready <= 0) return;
  if (fds[0].revents & POLLIN) table_.driver_wake.drain();
  std::lock_guard lock(table_.mu);
  service(fds, who);
}

template <class Finished>
bool Progress::drive(const Finished& finished, Clock::time_point deadline) {
  if (!finished()) {
    ++table_.waiters;
    struct Leave {
      Connections& table;
      ~Leave() { table.stop_waiting(); }
    } leave{table_};
    // Spin (poll without sleeping) for `spin`, and on while yielding the
    // CPU lets another thread run: the host has more threads that want to
    // run than cores (4 ranks on 2), so spinning costs no idle core, and
    // the rank this one waits for runs now instead of after a wake-up.
    // Sleeping comes at most kSharedSpin after the wait began.
    const auto began = Clock::now();
    auto spin_until = began + table_.opt.settings.spin;
    const auto spin_limit = began + std::max<Clock::duration>(table_.opt.settings.spin, kSharedSpin);
    // Kept by the thread between waits: no allocation per wait. (A wait
    // never runs inside another on one thread: consumers may not call the
    // transport.)
    static thread_local std::vector<pollfd> fds;
    static thread_local std::vector<int> who;
    // A wait with no time left still moves what is ready, once (a caller
    // that waits on several backends in turn polls each so).
    bool once = deadline <= began;
    while (!finished()) {
      auto now = Clock::now();
      if ((now >= deadline && !once) || waits_interrupted() != 0) break;
      std::unique_lock drive(drive_mu, std::try_to_lock);
      if (drive.owns_lock()) {
        while (!finished() && ((now = Clock::now()) < deadline || once) &&
               waits_interrupted() == 0) {
          int ms = 0;
          if (now >= spin_until && !once) ms = std::clamp(poll_ms_until(deadline), 1, 50);
          once = false;
          drive_once(ms, fds, who);
          // Spinning, let a thread waiting for this CPU run: on a busy host
          // it may be the one that sends what this wait is for.
          if (ms == 0 && !finished()) {
            const auto before = Clock::now();
            sched_yield();
            const auto after = Clock::now();
            if (after - before > kYieldedAfter)
              spin_until = std::min(spin_limit, after + table_.opt.settings.spin);
            // Requests finished a moment ago: more are on their way (a
            // collective's next segment), so waking up for them would cost
            // more than polling on.
            const auto active = Clock::time_point(Clock::duration(
                                    table_.last_done.load(std::memory_order_relaxed))) +
                                kActiveSpin;
            if (table_.opt.settings.spin.count() > 0 && active > spin_until)
              spin_until = std::min(active, began + kActiveSpinMax);
          }
        }
      } else {
        if (once) break;  // another thread drives
        std::unique_lock lock(table_.done_mu);
        table_.done_cv.wait_for(lock, 1ms);
      }
    }
  }
  return finished();
}

bool Progress::drive_until(TcpRequest& r, Clock::time_point deadline) {
  return drive([&r] { return !r.pending(); }, deadline);
}

bool Progress::drive_until_any(const std::function<bool()>& finished, Clock::time_point deadline) {
  return drive(finished, deadline);
}

void Progress::stop() {
  stopping_ = true;
  table_.background_wake.kick();
}

void Progress::background_loop() {
  std::vector<pollfd> fds;
  std::vector<int> who;
  auto next_check = Clock::now() + kCheckAliveEvery;
  bool woken = false;  // the last poll ended on a wake-up: work nobody waits for
  while (!stopping_.load()) {
    // Connections whose host may be gone (sockets.hpp: kLostAfter).
    if (const auto now = Clock::now(); now >= next_check) {
      next_check = now + kCheckAliveEvery;
      std::lock_guard lock(table_.mu);
      for (int rank : table_.connected)
        table_.peer(rank).check_alive(now);
    }
    fds.clear();
    who.clear();
    fds.push_back({table_.background_wake.fd(), POLLIN, 0});
    who.push_back(kWake);
    auto until = listener_.add_to_poll(fds, who, Clock::now() + 100ms);
    const bool driven = table_.waiters.load() > 0;
    if (!driven) {
      // While the callers' waits keep finishing requests, they move the
      // data: watching their sockets here too would wake this thread for
      // every message, on a core a caller spins on (with a rank per core,
      // small calls ran half again as slow whenever this thread fell in
      // step with them). It watches them when told of work
      // nobody waits for, or once the callers have been quiet for kQuiet.
      const auto quiet_from =
          Clock::time_point(Clock::duration(table_.last_done.load(std::memory_order_relaxed))) +
          kQuiet;
      if (woken || Clock::now() >= quiet_from) {
        std::lock_guard lock(table_.mu);
        auto rest_until = Clock::time_point::max();
        add_peers(fds, who, rest_until);
        until = std::min(until, rest_until);
      } else {
        until = std::min(until, quiet_from);
      }
    }
    // Published before it sleeps, then `waiters` read again: a caller that
    // stopped waiting meanwhile either sees this deadline (and wakes the
    // thread if it is too late) or is seen here (nudge_background).
    table_.background_until.store(until.time_since_epoch().count());
    if (driven && table_.waiters.load() == 0) {
      table_.background_until.store(0);
      continue;
    }
    const int ready = ::poll(fds.data(), fds.size(), poll_ms_until(until));
    table_.background_until.store(0);
    if (ready < 0 && errno != EINTR) {
      collie::log().error("rank {}: poll failed: {}", table_.opt.rank, std::strerror(errno));
      std::this_thread::sleep_for(10ms);
      continue;
    }
    woken = false;
    if (fds[0].revents & POLLIN) {
      table_.background_wake.drain();
      woken = table_.background_urgent.exchange(false);
    }
    listener_.service(fds, who);
    bool peer_events = false;
    for (std::size_t i = 0; i < fds.size(); ++i)
      peer_events = peer_events || (who[i] >= 0 && fds[i].revents != 0);
    if (peer_events && table_.waiters.load() == 0) {
      std::unique_lock drive(drive_mu, std::try_to_lock);
      if (drive.owns_lock()) {
        std::lock_guard lock(table_.mu);
        service(fds, who);
      }
    }
  }
}

}  // namespace collie::transport::tcp
