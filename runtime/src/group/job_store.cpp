// The job's rendezvous store: hosted by rank 0 or a launcher, or a file, or
// the program's own; a namespace per run and generation (job_store.hpp).
#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/address.hpp>
#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include "group/job_store.hpp"
#include <collie/log.hpp>
#include <collie/store/client.hpp>
#include <collie/store/etcd_store.hpp>
#include <collie/store/file_store.hpp>
#include <collie/keys.hpp>
#include <collie/store/prefix_store.hpp>

namespace collie {

namespace {

// Per store and rank: how many groups this process made and saw join.
std::mutex generations_mu;
std::map<std::string, int> generations;

// The stores rank 0 hosts, by port. A store outlives the group it was made
// for once every rank joined that group, until the process exits: the other
// ranks may still be leaving that group, or already joining the next one
// (destroy, then init again), and must not find it gone. The next group on
// the same port takes it over. A store whose group never formed stops with
// its JobStore.
struct Hosted {
  std::string host;
  std::string token;
  std::shared_ptr<store::StoreServer> server;
};
std::mutex hosted_mu;
std::map<std::uint16_t, Hosted>* hosted = nullptr;  // made once; emptied at exit

void stop_hosted_at_exit() {
  std::map<std::uint16_t, Hosted> last;
  {
    std::lock_guard lock(hosted_mu);
    if (hosted != nullptr) last.swap(*hosted);
  }
  // Clients still connected get a ConnectionError at once, as when the
  // process is killed.
  for (auto& [port, h] : last)
    h.server->stop();
}

std::shared_ptr<store::StoreServer> hosted_server(const store::ServerOptions& options) {
  std::lock_guard lock(hosted_mu);
  if (hosted == nullptr) {
    // What the servers use is set up before the exit handler is registered,
    // so it is torn down after the handler ran: the logger, and OpenSSL
    // (which registers its own clean-up on first use; a server stopped after
    // it would set it up again, and leak).
    collie::log();
    (void)crypto::random_u64();
    (void)crypto::hmac_sha256("", {});
    hosted = new std::map<std::uint16_t, Hosted>();
    std::atexit(stop_hosted_at_exit);
  }
  if (options.port != 0) {
    if (const auto it = hosted->find(options.port); it != hosted->end()) {
      if (it->second.host == options.host && it->second.token == options.token)
        return it->second.server;
      it->second.server->stop();  // another address or secret: the port is needed
      hosted->erase(it);
    }
  }
  auto server = std::make_shared<store::StoreServer>(options);
  (*hosted)[server->port()] = Hosted{options.host, options.token, server};
  return server;
}

// Stops a hosted store now (its group never formed).
void stop_hosted(const std::shared_ptr<store::StoreServer>& server) {
  {
    std::lock_guard lock(hosted_mu);
    if (const auto it = hosted->find(server->port());
        it != hosted->end() && it->second.server == server)
      hosted->erase(it);
  }
  server->stop();
}

// The job's keys in etcd, under /collie/<job>/.
std::shared_ptr<store::Store> open_etcd(const JobConfig& config) {
  store::EtcdOptions options;
  options.endpoints = config.etcd_endpoints;
  options.prefix = "/collie/" + config.etcd_job + "/";
  options.tls = {config.etcd_cacert, config.etcd_cert, config.etcd_key};
  options.insecure = config.etcd_insecure;
  options.timeout = config.timeout;
  if (options.insecure) {
    static std::once_flag said;
    std::call_once(said, [&] {
      collie::log().warn(
          "the job's keys in etcd at {} travel over plain HTTP without certificates "
          "(COLLIE_ETCD_INSECURE=1): anyone who reaches etcd can read and change them. The "
          "job's secret still guards the ranks' connections",
          fmt::join(options.endpoints, ","));
    });
  }
  return std::make_shared<store::EtcdStore>(options);
}

}  // namespace

JobStore::JobStore(const JobConfig& config) {
  const bool given = config.method == JobConfig::Method::Given;
  key_ = fmt::format("{}#{}#{}",
                     config.method == JobConfig::Method::File ? "file:" + config.file_path
                     : config.method == JobConfig::Method::Etcd
                         ? fmt::format("etcd:{}/{}", fmt::join(config.etcd_endpoints, ","),
                                       config.etcd_job)
                     : given ? "given:" + config.given_store_name
                             : join_host_port(config.master_addr, config.master_port),
                     config.restart_count, config.rank);
  // (A given store without a name counts no generations, and a newcomer
  // meets the job in its run's namespace, where expand() admits it.)
  if ((!given || !config.given_store_name.empty()) && !config.join) {
    std::lock_guard lock(generations_mu);
    generation_ = generations[key_];
  } else {
    key_.clear();
  }
  prefix_ = keys::run(config.restart_count, generation_);
  std::shared_ptr<store::Store> root;
  if (given) {
    if (!config.given_store) throw Error("collie::init: a given store that is null");
    root = config.given_store;
  } else if (config.method == JobConfig::Method::File) {
    root = std::make_shared<store::FileStore>(config.file_path, config.timeout);
  } else if (config.method == JobConfig::Method::Etcd) {
    root = open_etcd(config);
  } else {
    std::string host = config.master_addr;
    if (config.rank == 0 && !config.store_hosted_by_launcher && !config.join) {
      store::ServerOptions options;
      options.port = config.master_port;
      options.token = config.token;
      options.seal = seal::mode_of(config.transport.seal);
      options.certificates = transport::load_certificates(config.transport);
      // Ranks that reach the master on loopback are all on this host: the
      // store need not listen beyond it.
      const bool loopback = is_loopback_host(config.master_addr);
      if (loopback) options.host = config.master_addr;
      if (!loopback && config.token.empty()) {
        collie::log().warn(
            "rank 0 hosts the job's store on every interface, port {}, without a secret: anyone "
            "who can reach it can join the job as a rank, read and change its store, or stop it. "
            "Set COLLIE_STORE_TOKEN (or COLLIE_STORE_TOKEN_FILE) alike on every rank; `collie "
            "launch` makes one for a job on one node",
            config.master_port);
      }
      try {
        server_ = hosted_server(options);
      } catch (const Error& e) {
        throw Error(
            fmt::format("rank 0 hosts the job's store on MASTER_PORT={}{} but cannot: {} "
                        "(is another job using that port?)",
                        config.master_port,
                        config.port_source.empty() ? "" : " (" + config.port_source + ")",
                        e.what()));
      }
      host = "127.0.0.1";  // this process's own server
    }
    store::ClientOptions options;
    options.timeout = config.timeout;
    options.token = config.token;
    options.seal = seal::mode_of(config.transport.seal);
    options.certificates = transport::load_certificates(config.transport);
    root = std::make_shared<store::StoreClient>(host, config.master_port, options);
  }
  run_ = std::make_shared<store::PrefixStore>(root, keys::run(config.restart_count, 0));
  view_ = std::make_shared<store::PrefixStore>(std::move(root), prefix_);
}

JobStore::~JobStore() {
  if (server_ && !joined_) {
    view_.reset();  // this rank's client first, as before
    run_.reset();
    stop_hosted(server_);
  }
  if (!joined_ || key_.empty()) return;
  std::lock_guard lock(generations_mu);
  auto& next = generations[key_];
  next = std::max(next, generation_ + 1);
}

}  // namespace collie
