// The master's stall watch (master_state.hpp): a worker with operations
// queued that has finished none for the stall time (COLLIE_STALL_TIME) is
// named in the log, with what /proc says of its process where it is on
// this host (stopped, exited, alive), and again every stall time after; a
// wait that times out quotes the last report. Like the stall inspector of
// collectives (stall.hpp), it never fails anything: a long kernel is
// legitimate, and the report says the process is alive.
#include <fmt/format.h>

#include <collie/log.hpp>
#include <collie/keys.hpp>

#include "watch/stall.hpp"
#include "master_state.hpp"

namespace collie::mw::detail {

std::string MasterState::stalled(const Link& l, std::chrono::steady_clock::time_point now) const {
  const auto queued = l.pending.size();
  return fmt::format("{} has finished nothing for {:.1f} s with {} operation{} queued (the oldest: "
                     "{})",
                     l.name, std::chrono::duration<double>(now - l.last_news).count(),
                     queued, queued == 1 ? "" : "s",
                     queued == 0 ? "none" : l.pending.begin()->second.op->what);
}

void MasterState::watch_stalls() {
  if (stall_time.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::pair<int, std::string>> due;  // (rank, what it has not done)
  {
    std::lock_guard lock(sync->mu);
    for (auto& l : links) {
      if (!l.failure.empty() || l.pending.empty()) continue;
      if (now - l.last_news < stall_time * (l.stall_rounds + 1)) continue;
      ++l.stall_rounds;
      due.emplace_back(l.rank, stalled(l, now));
    }
  }
  for (const auto& [rank, text] : due) {
    std::string what;
    if (store != nullptr) {
      try {
        if (auto proc = store->try_get(keys::stall_process(rank), std::chrono::milliseconds(200)))
          what = describe_process(*proc);
      } catch (const std::exception&) {
      }
    }
    if (what.empty()) what = "its process could not be looked at (another host, or no store)";
    const auto report = fmt::format("{}: {}", text, what);
    log().warn("master-worker: {}", report);
    std::lock_guard lock(sync->mu);
    sync->stall_reports[rank] = report;
  }
}

}  // namespace collie::mw::detail
