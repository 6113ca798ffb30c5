// Opens a lost lane again (lane_keeper.hpp).
#include "lane_keeper.hpp"

#include <fmt/format.h>

#include <collie/log.hpp>
#include <collie/transport/interfaces.hpp>

#include "connections.hpp"

namespace collie::transport::tcp {

using Clock = std::chrono::steady_clock;

LaneKeeper::LaneKeeper(Connections& table,
                       std::function<std::string(int peer, Attempt&)> find_address)
    : table_(table), find_address_(std::move(find_address)) {}

LaneKeeper::~LaneKeeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LaneKeeper::wake() {
  std::lock_guard lock(mu_);
  if (stop_) return;
  work_ = true;
  if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  cv_.notify_all();
}

void LaneKeeper::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || work_; });
    if (stop_) return;
    work_ = false;
    lock.unlock();
    reopen_lost();
    lock.lock();
  }
}

void LaneKeeper::reopen_lost() {
  struct Wanted {
    int peer;
    int number;
    std::string lost_from;
  };
  std::vector<Wanted> wanted;
  {
    std::lock_guard lock(table_.mu);
    for (int rank : table_.connected) {
      auto& p = table_.peer(rank);
      for (auto& [number, from] : p.to_reopen)
        wanted.push_back({rank, number, std::move(from)});
      p.to_reopen.clear();
    }
  }
  for (const auto& w : wanted) {
    Attempt a;
    const auto where = find_address_(w.peer, a);
    std::string problem = a.error;
    LanePath path;
    if (problem.empty()) {
      // Any path but the lost lane's interface: the pair's own first.
      const auto paths = find_lane_paths(table_.opt, where);
      bool found = false;
      for (const auto& candidate : paths) {
        if (candidate.local == w.lost_from) continue;
        path = candidate;
        found = true;
        break;
      }
      if (!found) problem = "no other interface reaches it";
    }
    if (problem.empty()) {
      a = connect_to_peer(
          table_.opt, w.peer, path.remote, Clock::now() + table_.opt.handshake_timeout,
          table_.avoid_pacing.load(std::memory_order_relaxed), w.number, path.local);
      if (a.error.empty() && a.verdict != wire::Verdict::Accepted)
        a.error = fmt::format("rank {} did not accept lane {} again", w.peer, w.number);
      problem = a.error;
    }
    std::lock_guard lock(table_.mu);
    auto& p = table_.peer(w.peer);
    if (p.state != PeerState::Ready) continue;
    if (!problem.empty()) {
      collie::log().warn(
          "rank {}: could not open lane {} to {} again: {}; the pair goes on with "
          "the lanes left",
          table_.opt.rank, w.number, table_.describe_peer(w.peer), problem);
      continue;
    }
    p.reopen_out_lane(w.number, std::move(a.connection), std::move(a.seal), path.local);
    table_.wake_pollers(/*urgent=*/true);
    collie::log().warn("rank {}: lane {} to {} opened again{}", table_.opt.rank, w.number,
                       table_.describe_peer(w.peer),
                       path.local.empty() ? " over the pair's interface" : " from " + path.local);
  }
}

}  // namespace collie::transport::tcp
