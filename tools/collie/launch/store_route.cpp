// How a node's launcher and ranks reach the job's store (store_route.hpp).
#include "store_route.hpp"

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/address.hpp>
#include <collie/error.hpp>
#include <collie/store/etcd_store.hpp>
#include <collie/transport/interfaces.hpp>

#include "etcd_args.hpp"
#include "keys.hpp"
#include "store_address.hpp"
#include "torchrun_args.hpp"

namespace collie::cli {

namespace {

std::chrono::milliseconds of_seconds(double s) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(s * 1000));
}

// This host's address toward an etcd member ("host:port" or with a scheme).
std::string advertised_toward(std::string endpoint) {
  for (const std::string scheme : {"https://", "http://"})
    if (endpoint.starts_with(scheme)) endpoint = endpoint.substr(scheme.size());
  const auto at = split_host_port(endpoint);
  const auto host = at ? at->host : endpoint;
  try {
    return transport::route_source_address(host);
  } catch (const std::exception& e) {
    throw Error(fmt::format("collie launch: no route from this node toward etcd at {}: {}",
                            endpoint, e.what()));
  }
}

// "=eth0": the interface this host reaches `host` by ("" if none is found).
std::string interface_toward(const std::string& host) {
  try {
    return interface_with(transport::route_source_address(host));
  } catch (const std::exception&) {
    return "";
  }
}

}  // namespace

StoreRoute::StoreRoute(const LaunchArgs& args) : args_(args), port_(args.port) {
  resolve_token();  // before anything starts: a job without one may be refused
}

NodeTeam::Timeouts StoreRoute::timeouts() const {
  return {of_seconds(args_.node_timeout_s), of_seconds(args_.join_timeout_s)};
}

void StoreRoute::resolve_token() {
  if (!args_.token_file.empty()) {
    token_ = store::read_token_file(args_.token_file);
    return;
  }
  token_ = store::token_from_environment();
  if (!token_.empty()) return;
  if (!multi_node()) {
    token_ = store::random_token();
    return;
  }
  no_secret_ = true;
  if (!args_.insecure) {
    throw Error(fmt::format(
        "collie launch: a job on several nodes needs a secret that every node shares, or "
        "anyone who can reach port {} can join it as a rank or stop it: give every node the "
        "same --token-file (or COLLIE_STORE_TOKEN_FILE, or COLLIE_STORE_TOKEN), made once "
        "with e.g. `head -c 32 /dev/urandom | base64 > job.token`; --insecure runs without "
        "one",
        port_));
  }
}

// Serves the store on this node; false when a c10d node finds the
// endpoint's port taken on its own host (another node's launcher there),
// and so joins that one instead.
bool StoreRoute::host(const std::function<void(const std::string&)>& say) {
  store::ServerOptions options;
  // A job on this node alone keeps its store on loopback.
  options.host = multi_node() ? std::string() : args_.master_addr;
  options.port = static_cast<std::uint16_t>(port_);
  options.token = token_;
  options.seal = store::seal_from_environment();
  options.certificates = store::certificates_from_environment();
  // torch programs rendezvous in this store too (TORCHELASTIC_USE_AGENT_STORE):
  // on one node its clients are on loopback and must run as this user;
  // across nodes torch's protocol cannot prove the job's secret, so only
  // with --insecure.
  options.torch_clients = true;
  // Across nodes, on loopback only: the other nodes' torch clients come
  // through their launcher's relay, which proves the job's secret.
  options.torch_loopback_only = secure_nodes();
  options.torch_refusal_hint =
      "collie launch's ranks reach the store through their node's relay on loopback; "
      "docs/launching.md";
  store::raise_open_file_limit();
  try {
    server_ = std::make_unique<store::StoreServer>(options);
  } catch (const Error& e) {
    if (args_.node_rank_value >= 0 || args_.is_host.has_value() || args_.etcd) throw;
    say(fmt::format("not hosting the store ({}): joining the one at {}:{}", e.what(),
                    args_.master_addr, port_));
    return false;
  }
  port_ = server_->port();
  if (!args_.port_file.empty()) write_port_file(args_.port_file, server_->port());
  if (multi_node()) say(fmt::format("store listening on port {}", port_));
  return true;
}

void StoreRoute::open(const std::function<void(const std::string&)>& say) {
  if (args_.etcd) {
    auto options = etcd_launch_options(args_);
    options.timeout = timeouts().join;
    auto etcd = std::make_shared<store::EtcdStore>(options);
    say(fmt::format("meeting in {}", etcd->describe()));
    team_ = std::make_unique<NodeTeam>(std::move(etcd), args_.nnodes_max, timeouts());
    if (no_secret_) {
      say("WARNING: --insecure: this job has no secret. Anyone who can reach its nodes can join "
          "it as a rank, read and change its ranks' store, or stop it.");
    }
    return;
  }
  if (no_secret_) {
    say(fmt::format(
        "WARNING: --insecure: this job has no secret. Anyone who can reach port {} on {} can "
        "join it as a rank, read and change its store, or stop it.",
        port_, args_.host_store ? "this host" : args_.master_addr));
  }
  const bool hosting = args_.host_store && host(say);
  if (multi_node()) {
    const int rank = elastic() ? NodeTeam::kElastic : hosting ? 0 : args_.node_rank_value;
    team_ = std::make_unique<NodeTeam>(hosting ? std::string("127.0.0.1") : args_.master_addr,
                                       static_cast<std::uint16_t>(port_), token_, rank,
                                       args_.nnodes_max, timeouts());
    if (args_.node_rank_value < 0 && !elastic())
      say(fmt::format("joined as node {}", team_->node_rank()));
  }
  route_ranks(args_.master_addr, hosting);
}

void StoreRoute::route_ranks(const std::string& host, bool hosting) {
  store_host_ = host;
  rank_host_ = host;
  rank_port_ = port_;
  rank_ifname_ = args_.socket_ifname;
  if (!secure_nodes()) return;
  // The ranks reach the store on this host's loopback: torch's clients
  // there are served (as this user's), where across hosts they could not
  // prove the secret. Off the store's node, through a relay.
  if (!hosting) {
    store::ClientOptions options;
    options.token = token_;
    options.seal = store::seal_from_environment();
    options.certificates = store::certificates_from_environment();
    options.connect_timeout = timeouts().join;
    relay_ = std::make_unique<store::TorchRelay>(host, static_cast<std::uint16_t>(port_), options);
  }
  rank_host_ = "127.0.0.1";
  rank_port_ = relay_ ? relay_->port() : port_;
  // Their own connections still leave by the interface toward the store's host.
  if (rank_ifname_.empty() && !environment::get(environment::kSocketIfname))
    rank_ifname_ = interface_toward(host);
}

void StoreRoute::begin_round(int round, int node_rank,
                             const std::function<void(const std::string&)>& say) {
  relay_.reset();
  local_.reset();
  server_.reset();
  port_ = args_.port;
  auto& launchers = team_->store();
  const auto key = keys::launch_round(round, "store");
  if (node_rank == kRoundStoreNode) {
    host(say);
    // The address the other nodes reach this one by: the one it reaches etcd from.
    const auto here = advertised_toward(args_.etcd_endpoints.front());
    launchers.set(key, join_host_port(here, static_cast<std::uint16_t>(port_)));
    route_ranks(here, true);
    return;
  }
  const auto at = launchers.get(key, timeouts().join);
  const auto address = split_host_port(at);
  if (!address) {
    throw Error(fmt::format(
        "collie launch: round {}: the ranks' store's address in etcd, '{}', is not host:port",
        round, at));
  }
  port_ = address->port;
  route_ranks(address->host, false);
}

store::Store* StoreRoute::reader() {
  if (team_ && !args_.etcd) return &team_->store();
  if (args_.etcd && !server_ && !local_ && !store_host_.empty()) {
    using namespace std::chrono_literals;
    store::ClientOptions options;
    options.token = token_;
    options.seal = store::seal_from_environment();
    options.certificates = store::certificates_from_environment();
    options.timeout = 2s;
    // The round's store is up until every node has read it, unless its
    // node is gone: a store that refuses is not waited for (the next
    // round goes on without it).
    options.connect_timeout = 500ms;
    local_ = std::make_unique<store::StoreClient>(store_host_, static_cast<std::uint16_t>(port_),
                                                  options);
    return local_.get();
  }
  if (!server_) return nullptr;
  if (!local_) {
    using namespace std::chrono_literals;
    store::ClientOptions options;
    options.token = token_;
    options.seal = store::seal_from_environment();
    options.certificates = store::certificates_from_environment();
    options.timeout = 2s;
    options.connect_timeout = 2s;
    local_ = std::make_unique<store::StoreClient>("127.0.0.1", static_cast<std::uint16_t>(port_),
                                                  options);
  }
  return local_.get();
}

}  // namespace collie::cli
