// How the launchers of a job on several nodes tell each other about
// failures, restarts and the end, through the job's store (keys.hpp's
// collie/launch/ keys): the first failure of an attempt is recorded once
// and every node stops; each launcher beats a heartbeat, and one that stops
// beating for --node-timeout counts as failed; restarts wait at a barrier;
// at the end every node waits for the others, and node 0 (whose store they
// use) for every node to leave. Used by the launcher's one thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <collie/store/client.hpp>

namespace collie::cli {

class NodeTeam {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to the job's store at host:port; this launcher is node
  // `node_rank` of `nodes`, or with -1 the next to join (torchrun's c10d:
  // the store's own node is 0, the others are numbered as they join).
  // Throws collie::Error when more than `nodes` join.
  NodeTeam(const std::string& host, std::uint16_t port, const std::string& token, int node_rank,
           int nodes, std::chrono::milliseconds node_timeout);

  store::StoreClient& store() { return *store_; }
  int node_rank() const { return node_rank_; }

  // The attempt the next calls are about.
  void begin_attempt(int attempt);
  // Records why this node's attempt failed, unless another node did first.
  // Throws collie::Error if the store cannot be reached.
  void report_failure(const std::string& why, std::chrono::milliseconds timeout);
  // Why another node failed (its record, or its silence), or that the
  // store was lost; asked at most every 250 ms (nullopt in between).
  std::optional<std::string> other_failure();
  // Waits for every node before a restart.
  void restart_barrier();
  // This node's ranks all succeeded: waits for the others. nullopt when
  // every node did, else what to say.
  std::optional<std::string> finish();

 private:
  std::string key(std::string_view what) const;
  // Beats this node's heartbeat, and names the first other node whose
  // heartbeat has not moved for the node timeout (a launcher that died
  // without reporting, or a node that never joined), if any.
  std::optional<std::string> silent_node();
  // Starts the silence clock of every other node afresh: between phases (a
  // restart barrier, the end of an attempt) nobody beats, and that pause
  // must not count as silence.
  void reset_heartbeats();

  std::unique_ptr<store::StoreClient> store_;
  int node_rank_;
  int nodes_;
  std::chrono::milliseconds node_timeout_;
  int attempt_ = 0;
  Clock::time_point next_check_;
  Clock::time_point next_heartbeat_;
  struct Heartbeat {
    std::string value;
    Clock::time_point changed = Clock::now();
  };
  std::vector<Heartbeat> heartbeats_;
};

}  // namespace collie::cli
