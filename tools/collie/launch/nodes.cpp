// The launchers of a job on several nodes, through its store (launch/nodes.hpp).
#include "nodes.hpp"
#include "keys.hpp"

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/etcd_store.hpp>

namespace collie::cli {

using namespace std::chrono_literals;

std::string seconds_text(std::chrono::steady_clock::duration d) {
  return fmt::format("{:.1f} s", std::chrono::duration<double>(d).count());
}

NodeTeam::NodeTeam(const std::string& host, std::uint16_t port, const std::string& token,
                   int node_rank, int nodes, Timeouts timeouts)
    : node_rank_(node_rank),
      nodes_(nodes),
      timeouts_(timeouts),
      heartbeats_(static_cast<std::size_t>(nodes)) {
  store::ClientOptions options;
  options.token = token;
  options.seal = store::seal_from_environment();
  options.certificates = store::certificates_from_environment();
  options.timeout = std::chrono::seconds(300);
  // The store's node may start it after this one: wait for it as for a
  // node that has not joined yet.
  options.connect_timeout = timeouts.join;
  store_ = std::make_shared<store::StoreClient>(host, port, options);
  if (node_rank_ >= 0 || node_rank_ == kElastic) return;
  const auto joined = store_->add(keys::launch_round(0, "joined"), 1, 10s);
  if (joined >= nodes) {
    throw Error(fmt::format(
        "collie launch: {} nodes have joined the job at {}:{}, and it has --nnodes {}: this one "
        "is not needed",
        joined + 1, host, port, nodes));
  }
  node_rank_ = static_cast<int>(joined);
}

NodeTeam::NodeTeam(std::shared_ptr<store::Store> store, int nodes, Timeouts timeouts)
    : store_(std::move(store)),
      node_rank_(kElastic),
      nodes_(nodes),
      timeouts_(timeouts),
      heartbeats_(static_cast<std::size_t>(nodes)) {}

NodeTeam::Round NodeTeam::rendezvous(int attempt, const Elastic& elastic,
                                     const std::string& who) {
  const auto deadline = Clock::now() + timeouts_.join;
  auto ended = [&] {
    if (elastic.check_signals) elastic.check_signals();
    if (auto how = store_->try_get(keys::launch_ended(), 10s))
      throw Error("collie launch: the job ended while this node waited to join it: " + *how);
  };
  auto count = [&](int round) {
    const auto joined = store_->try_get(keys::launch_round(round, "joined"), 10s);
    return joined ? std::stoll(*joined) : 0LL;
  };
  auto too_late = [&](int round, const std::string& what) {
    if (Clock::now() < deadline) return;
    throw Error(fmt::format(
        "collie launch: round {} of the rendezvous: {} within {} (--join-timeout; --nnodes {}:{})",
        round, what, seconds_text(timeouts_.join), elastic.min_nodes, elastic.max_nodes));
  };
  for (int round = attempt;; ++round) {
    ended();
    const auto joined = store_->add(keys::launch_round(round, "joined"), 1, 10s) - 1;
    store_->set(keys::launch_round(round, fmt::format("node/{}", joined)), who, 10s);
    // In etcd, this node's first heartbeat of the round, on its lease.
    if (auto* etcd = dynamic_cast<store::EtcdStore*>(store_.get()))
      etcd->put_with_lease(keys::launch_round(round, fmt::format("beat/{}", joined)), "0", 10s);
    // Every node closes the round (no node need host the store: etcd, or
    // `collie store serve` at a c10d endpoint): the first MIN, then whoever
    // joins within the last call, MAX at most. The first to close it sets
    // the count; a node that finds it closed already takes that.
    const auto closed_key = keys::launch_round(round, "closed");
    std::optional<std::string> closed;
    const auto is_closed = [&] { return (closed = store_->try_get(closed_key, 10s)).has_value(); };
    while (!is_closed() && count(round) < elastic.min_nodes) {
      ended();
      too_late(round, fmt::format("{} of at least {} nodes joined", count(round),
                                  elastic.min_nodes));
      std::this_thread::sleep_for(50ms);
    }
    // With `settle`, the last call also ends once no node joined for that
    // long (and so goes on while they keep coming); once every node
    // `expected` is here, after `expected_settle`.
    const auto began = Clock::now();
    const auto last = began + elastic.last_call;
    auto joined_last = began;
    std::set<std::string> awaited(elastic.expected.begin(), elastic.expected.end());
    std::vector<std::string> names;  // the first nodes', in order of joining: read once
    const auto all_expected = [&](long long seen) {
      if (elastic.expected.empty()) return false;
      while (static_cast<long long>(names.size()) < seen && !awaited.empty()) {
        auto name = store_->try_get(
            keys::launch_round(round, fmt::format("node/{}", names.size())), 10s);
        if (!name) break;  // it joined, and writes its name next
        awaited.erase(*name);
        names.push_back(std::move(*name));
      }
      return awaited.empty();
    };
    for (auto seen = count(round); !closed && !is_closed() && seen < elastic.max_nodes &&
                                   Clock::now() < last;) {
      const auto settle = all_expected(seen) ? elastic.expected_settle : elastic.settle;
      if (elastic.settle.count() > 0 && Clock::now() >= joined_last + settle) break;
      ended();
      std::this_thread::sleep_for(50ms);
      if (const auto now = count(round); now != seen) {
        seen = now;
        joined_last = Clock::now();
      }
    }
    if (!closed) {
      const auto n = std::min<long long>(count(round), elastic.max_nodes);
      store_->compare_set(closed_key, "", std::to_string(n), 10s);
      closed = store_->get(closed_key, 10s);
    }
    const int nodes = std::stoi(*closed);
    if (joined >= nodes) continue;  // it closed before this node came: the next round
    Round r;
    r.attempt = round;
    r.node_rank = static_cast<int>(joined);
    r.nodes = nodes;
    for (int n = 0; n < nodes; ++n) {
      r.members.push_back(
          n < static_cast<int>(names.size())
              ? names[static_cast<std::size_t>(n)]
              : store_->try_get(keys::launch_round(round, fmt::format("node/{}", n)), 10s)
                    .value_or(fmt::format("node {}", n)));
    }
    node_rank_ = r.node_rank;
    nodes_ = nodes;
    heartbeats_.assign(static_cast<std::size_t>(nodes), Heartbeat{});
    return r;
  }
}

std::optional<std::string> NodeTeam::newcomer(int max_nodes) {
  if (nodes_ >= max_nodes || Clock::now() < next_newcomer_check_) return std::nullopt;
  next_newcomer_check_ = Clock::now() + 250ms;
  try {
    const auto next = attempt_ + 1;
    if (!store_->try_get(keys::launch_round(next, "joined"), 10s)) return std::nullopt;
    const auto who = store_->try_get(keys::launch_round(next, "node/0"), 10s);
    return fmt::format("{} is waiting to join (the job has {} nodes of at most {})",
                       who.value_or("a node"), nodes_, max_nodes);
  } catch (const Error&) {
    return std::nullopt;  // other_failure() says it
  }
}

void NodeTeam::mark_regroup() {
  store_->compare_set(key("regroup"), "", "1", 10s);
}

bool NodeTeam::regrouped() {
  if (lost_) return false;
  try {
    return store_->try_get(key("regroup"), 10s).has_value();
  } catch (const Error&) {
    return false;  // the store is gone: a failure, which other_failure() said
  }
}

void NodeTeam::end_job(const std::string& how) {
  if (lost_) return;  // nobody to tell: the store is gone
  try {
    store_->compare_set(keys::launch_ended(), "", how, 5s);
  } catch (const Error&) {
  }
}

std::string NodeTeam::key(std::string_view what) const {
  return keys::launch_attempt(attempt_, what);
}

void NodeTeam::begin_attempt(int attempt) {
  attempt_ = attempt;
  reset_heartbeats();
}

void NodeTeam::report_failure(const std::string& why, std::chrono::milliseconds timeout) {
  store_->compare_set(key("failed"), "", why, timeout);
}

std::optional<std::string> NodeTeam::other_failure() {
  if (Clock::now() < next_check_) return std::nullopt;
  next_check_ = Clock::now() + 250ms;
  try {
    auto failed = store_->try_get(key("failed"), 10s);
    if (!failed) failed = silent_node();
    return failed;
  } catch (const Error& e) {
    lost_ = true;  // the calls after this would each wait their timeout in vain
    return fmt::format("lost the launchers' store: {}", e.what());
  }
}

void NodeTeam::restart_barrier() {
  store_->barrier(key("restart"), static_cast<std::uint32_t>(nodes_), timeouts_.join);
}

void NodeTeam::reset_heartbeats() {
  for (auto& seen : heartbeats_)
    seen.changed = Clock::now();
}

std::optional<std::string> NodeTeam::silent_node() {
  const auto now = Clock::now();
  if (now < next_heartbeat_) return std::nullopt;
  next_heartbeat_ = now + 250ms;
  if (auto* etcd = dynamic_cast<store::EtcdStore*>(store_.get())) return gone_node(*etcd);
  store_->add(keys::launch_heartbeat(node_rank_), 1, 10s);
  for (int node = 0; node < nodes_; ++node) {
    if (node == node_rank_) continue;
    auto beat = store_->try_get(keys::launch_heartbeat(node), 10s);
    auto& seen = heartbeats_[static_cast<std::size_t>(node)];
    if (beat && *beat != seen.value) {
      seen.value = *beat;
      seen.changed = now;
    } else if (const bool joined = !seen.value.empty();
               now - seen.changed > (joined ? timeouts_.node : timeouts_.join)) {
      return fmt::format("node {} {} (no heartbeat for {}, --{}-timeout {})", node,
                         joined ? "stopped answering" : "never joined",
                         seconds_text(now - seen.changed), joined ? "node" : "join",
                         std::chrono::duration<double>(joined ? timeouts_.node : timeouts_.join)
                             .count());
    }
  }
  return std::nullopt;
}

// In etcd each node's heartbeat is a key on its launcher's lease, put when
// it joined the round (rendezvous()): the lease keeps it while the launcher
// lives, and when it dies the key goes within the lease's time to live. So
// nobody beats; each node reads the next node's key once a second (a ring:
// every node is watched by one, and any death ends the attempt for all),
// one read whatever the number of nodes.
std::optional<std::string> NodeTeam::gone_node(store::EtcdStore& etcd) {
  next_heartbeat_ = Clock::now() + 1s;
  if (nodes_ < 2) return std::nullopt;
  const int node = (node_rank_ + 1) % nodes_;
  if (etcd.try_get(keys::launch_round(attempt_, fmt::format("beat/{}", node)), 10s))
    return std::nullopt;
  // Every node finished: it left (its lease went with it), it did not die.
  const auto done = store_->try_get(key("done"), 10s);
  if (done && std::stoll(*done) >= nodes_) return std::nullopt;
  return fmt::format("node {} is gone (its launcher's lease in etcd expired: it died, or "
                     "could not reach etcd for {})",
                     node, seconds_text(etcd.options().lease_ttl));
}

std::optional<std::string> NodeTeam::finish(bool hosts_store) {
  // The store's node must outlive every node's last use of its store.
  try {
    store_->add(key("done"), 1);
    reset_heartbeats();
    std::optional<std::string> failed;
    while (true) {
      failed = store_->try_get(key("failed"));
      if (!failed) failed = silent_node();
      if (failed) break;
      if (std::stoll(store_->get(key("done"))) >= nodes_) break;
      std::this_thread::sleep_for(100ms);
    }
    if (failed) return fmt::format("this node's ranks succeeded, but {}", *failed);
    store_->add(key("left"), 1);
    if (hosts_store) {
      const auto deadline = Clock::now() + 10s;
      while (std::stoll(store_->get(key("left"))) < nodes_ && Clock::now() < deadline) {
        std::this_thread::sleep_for(50ms);
      }
    }
  } catch (const Error& e) {
    return fmt::format("every rank here succeeded, but the nodes could not agree on the end: {}",
                       e.what());
  }
  return std::nullopt;
}

}  // namespace collie::cli
