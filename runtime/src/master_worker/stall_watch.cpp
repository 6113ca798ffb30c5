// The master's stall watch (master_state.hpp): a worker with operations
// queued that has finished none for the stall time (COLLIE_STALL_TIME) is
// named in the log, with what /proc says of its process where it is on
// this host (stopped, exited, alive), and again every stall time after; a
// wait that times out quotes the last report. Like the stall inspector of
// collectives (stall.hpp), it never fails anything: a long kernel is
// legitimate, and the report says the process is alive.
#include <fmt/format.h>

#include <collie/log.hpp>
#include <collie/store/keys.hpp>

#include "../stall.hpp"
#include "master_state.hpp"

namespace collie::mw::detail {

void MasterState::watch_stalls() {
  if (stall_time.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  struct Due {
    Link* link;
    std::size_t queued;
    std::string oldest;
    long seconds;
  };
  std::vector<Due> due;
  {
    std::lock_guard lock(sync->mu);
    for (auto& l : links) {
      if (!l.failure.empty() || l.pending.empty()) continue;
      if (now - l.last_news < stall_time * (l.stall_rounds + 1)) continue;
      ++l.stall_rounds;
      due.push_back({&l, l.pending.size(), l.pending.begin()->second.op->what,
                     static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(
                                           now - l.last_news)
                                           .count())});
    }
  }
  for (const auto& d : due) {
    std::string what;
    if (store != nullptr) {
      try {
        if (auto proc = store->try_get(keys::stall_process(d.link->rank),
                                       std::chrono::milliseconds(200)))
          what = describe_process(*proc);
      } catch (const std::exception&) {
      }
    }
    if (what.empty()) what = "its process could not be looked at (another host, or no store)";
    const auto report = fmt::format("{} has finished nothing for {} s with {} operation{} queued "
                                    "(the oldest: {}): {}",
                                    d.link->name, d.seconds, d.queued, d.queued == 1 ? "" : "s",
                                    d.oldest, what);
    log().warn("master-worker: {}", report);
    std::lock_guard lock(sync->mu);
    sync->stall_reports[d.link->rank] = report;
  }
}

}  // namespace collie::mw::detail
