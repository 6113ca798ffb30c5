// How this node's launcher and its ranks reach the job's store, decided
// once when the launcher starts: the job's secret (--token-file, else
// COLLIE_STORE_TOKEN or COLLIE_STORE_TOKEN_FILE, else on one node a fresh
// random one; several nodes must share one, or say --insecure); whether
// this node hosts the store (node 0, or c10d's host) or joins the one at
// --master-addr (a c10d node that finds the endpoint's port taken on its
// own host joins it); on several nodes, the launchers' team (nodes.hpp);
// and what the ranks are given: the store's address and port, and the
// interface to advertise. Several nodes with a secret: the ranks meet on
// their own host's loopback, where torch's clients are served as this
// user's, through this node's relay when the store is elsewhere
// (store/torch_relay.hpp). Used by the launcher's one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <collie/store/client.hpp>
#include <collie/store/server.hpp>
#include <collie/store/torch_relay.hpp>

#include "args.hpp"
#include "nodes.hpp"

namespace collie::cli {

class StoreRoute {
 public:
  // Resolves the secret (throws collie::Error when several nodes have none
  // and --insecure is not given); starts nothing yet.
  explicit StoreRoute(const LaunchArgs& args);

  // Hosts or joins the store, joins the team, opens the relay. `say`
  // prints a line of the launcher's. With etcd: joins the team there only.
  void open(const std::function<void(const std::string&)>& say);

  // With etcd, the node of each round that hosts the ranks' store.
  static constexpr int kRoundStoreNode = 0;
  // With etcd, after each round's rendezvous: the round's node 0 hosts the
  // ranks' store (a fresh one, on --master-port or a free port) and says
  // where in etcd; the others read it and reach it as a node that does not
  // host reaches the store. The previous round's store or relay goes.
  void begin_round(int round, int node_rank, const std::function<void(const std::string&)>& say);

  const std::string& token() const { return token_; }
  bool hosts() const { return server_ != nullptr; }
  // The store's own port (after open(): the one it listens on).
  int port() const { return port_; }
  // The launchers' team; null on one node.
  NodeTeam* team() const { return team_.get(); }
  NodeTeam::Timeouts timeouts() const;

  // What the ranks are given: MASTER_ADDR, MASTER_PORT, and
  // COLLIE_SOCKET_IFNAME ("" to leave theirs).
  const std::string& rank_host() const { return rank_host_; }
  int rank_port() const { return rank_port_; }
  const std::string& rank_ifname() const { return rank_ifname_; }

  // A store to read the ranks' keys in after an attempt: the team's, or on
  // one node a client of the store this launcher hosts; null if neither.
  store::Store* reader();

 private:
  bool multi_node() const { return args_.nnodes_max > 1 || args_.etcd; }
  bool elastic() const { return args_.nnodes_min != args_.nnodes_max; }
  // Several nodes with a secret: the ranks meet on loopback (above).
  bool secure_nodes() const { return multi_node() && !args_.insecure; }
  void resolve_token();
  bool no_secret_ = false;  // several nodes, --insecure, and no token given
  bool host(const std::function<void(const std::string&)>& say);
  // What the ranks are given to reach the store at `host` (rank_host_, ...).
  void route_ranks(const std::string& host, bool hosting);

  const LaunchArgs& args_;
  std::string token_;
  int port_ = 0;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::TorchRelay> relay_;   // nodes but the store's, with a secret
  std::unique_ptr<NodeTeam> team_;             // several nodes only
  std::unique_ptr<store::StoreClient> local_;  // reader() on one node
  std::string store_host_;  // where the store is (this round's, with etcd)
  std::string rank_host_;
  int rank_port_ = 0;
  std::string rank_ifname_;
};

}  // namespace collie::cli
