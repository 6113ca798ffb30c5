// How the launchers of a job on several nodes tell each other about
// failures, restarts and the end, through the job's store (keys.hpp's
// collie/launch/ keys): the first failure of an attempt is recorded once
// and every node stops; each launcher beats a heartbeat, and one that stops
// beating for --node-timeout (or never beats within --join-timeout) counts
// as failed; restarts wait at a barrier;
// at the end every node waits for the others, and node 0 (whose store they
// use) for every node to leave. An elastic job (--nnodes MIN:MAX) meets
// again for each attempt: a round of the rendezvous, closed by the first
// node to see MIN nodes joined and the last call for more ended (any node:
// the store may be one no launcher hosts); a node that
// comes later waits for the next round, and the running nodes, seeing it,
// start one. Used by the launcher's one thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <collie/store/client.hpp>
#include <collie/store/etcd_store.hpp>

namespace collie::cli {

// A duration as the launcher's messages write it: "2.5 s".
std::string seconds_text(std::chrono::steady_clock::duration d);

class NodeTeam {
 public:
  using Clock = std::chrono::steady_clock;

  // Connects to the job's store at host:port; this launcher is node
  // `node_rank` of `nodes`, or with -1 the next to join (torchrun's c10d:
  // the store's own node is 0, the others are numbered as they join), or
  // with kElastic numbered by each round (rendezvous()). A node that
  // stops beating for `node_timeout` has failed; one that has not joined
  // (or the store's node not started) within `join_timeout` too. Throws
  // collie::Error when more than `nodes` join.
  static constexpr int kElastic = -2;
  struct Timeouts {
    std::chrono::milliseconds node;
    std::chrono::milliseconds join;
  };
  NodeTeam(const std::string& host, std::uint16_t port, const std::string& token, int node_rank,
           int nodes, Timeouts timeouts);
  // An elastic team in a store nobody of the job hosts (etcd): every node
  // may close a round.
  NodeTeam(std::shared_ptr<store::Store> store, int nodes, Timeouts timeouts);

  store::Store& store() { return *store_; }
  int node_rank() const { return node_rank_; }

  // An elastic job's round: its attempt, this node's number in it, its
  // nodes, and who each is ("host pid 123").
  struct Round {
    int attempt = 0;
    int node_rank = 0;
    int nodes = 0;
    std::vector<std::string> members;
  };
  struct Elastic {
    int min_nodes = 1;
    int max_nodes = 1;
    std::chrono::milliseconds last_call{0};
    // Nonzero: the last call ends too once no node joined for this long.
    std::chrono::milliseconds settle{0};
    // The nodes (as `who` names them) expected back: once all of them have
    // joined, the last call ends after `expected_settle` without a join
    // (shorter than `settle`). Empty: none is.
    std::vector<std::string> expected;
    std::chrono::milliseconds expected_settle{0};
    // Asked while waiting: a signal to the launcher ends the wait (throws).
    std::function<void()> check_signals;
  };
  // Joins the first round, from `attempt` on, that still takes nodes, and
  // returns it once closed: its nodes are the first to join, at least MIN,
  // as many as joined within the last call after that, MAX at most. Throws
  // collie::Error when MIN do not join within the join timeout, or when the
  // job ended (keys::launch_ended) while this node waited.
  Round rendezvous(int attempt, const Elastic& elastic, const std::string& who);
  // A node waits to join the round after this attempt's (nullopt if none,
  // or the job has `max_nodes` already); asked at most every 250 ms.
  std::optional<std::string> newcomer(int max_nodes);
  // Marks this attempt as ended for a change of nodes, not a failure (the
  // first to see the change does, before stopping its ranks), and whether
  // it is so marked.
  void mark_regroup();
  bool regrouped();
  // Says how the job ended, for nodes still waiting to join it.
  void end_job(const std::string& how);

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
  // This node's ranks all succeeded: waits for the others (and, on the
  // store's node, `hosts_store`, for every node to leave). nullopt when
  // every node did, else what to say.
  std::optional<std::string> finish(bool hosts_store);

 private:
  std::string key(std::string_view what) const;
  // Beats this node's heartbeat, and names the first other node whose
  // heartbeat has not moved for the node timeout (a launcher that died
  // without reporting), or that has not beaten within the join timeout of
  // the attempt's start (a node that never joined), if any.
  std::optional<std::string> silent_node();
  // silent_node() in etcd: a node whose heartbeat key went with its lease.
  std::optional<std::string> gone_node(store::EtcdStore& etcd);
  // Starts the silence clock of every other node afresh: between phases (a
  // restart barrier, the end of an attempt) nobody beats, and that pause
  // must not count as silence.
  void reset_heartbeats();

  std::shared_ptr<store::Store> store_;
  int node_rank_;
  int nodes_;
  Timeouts timeouts_;
  int attempt_ = 0;
  Clock::time_point next_check_;
  Clock::time_point next_newcomer_check_;
  Clock::time_point next_heartbeat_;
  struct Heartbeat {
    std::string value;
    Clock::time_point changed = Clock::now();
  };
  std::vector<Heartbeat> heartbeats_;
  bool lost_ = false;  // a call found the store gone (other_failure())
};

}  // namespace collie::cli
