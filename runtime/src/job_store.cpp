// The job's rendezvous store: hosted by rank 0 or a launcher, or a file, or
// the program's own; a namespace per run and generation (job_store.hpp).
#include <algorithm>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/error.hpp>
#include "job_store.hpp"
#include <collie/log.hpp>
#include <collie/store/client.hpp>
#include <collie/store/file_store.hpp>
#include <collie/store/keys.hpp>
#include <collie/store/prefix_store.hpp>

namespace collie {

namespace {

// Per store and rank: how many groups this process made and saw join.
std::mutex generations_mu;
std::map<std::string, int> generations;

}  // namespace

JobStore::JobStore(const JobConfig& config) {
  const bool given = config.method == JobConfig::Method::Given;
  key_ = fmt::format("{}#{}#{}",
                     config.method == JobConfig::Method::File ? "file:" + config.file_path
                     : given ? "given:" + config.given_store_name
                             : join_host_port(config.master_addr, config.master_port),
                     config.restart_count, config.rank);
  // (A given store without a name counts no generations.)
  if (!given || !config.given_store_name.empty()) {
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
  } else {
    std::string host = config.master_addr;
    if (config.rank == 0 && !config.store_hosted_by_launcher) {
      store::ServerOptions options;
      options.port = config.master_port;
      options.token = config.token;
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
        server_ = std::make_unique<store::StoreServer>(options);
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
    root = std::make_shared<store::StoreClient>(host, config.master_port, options);
  }
  view_ = std::make_shared<store::PrefixStore>(std::move(root), prefix_);
}

JobStore::~JobStore() {
  if (!joined_ || key_.empty()) return;
  std::lock_guard lock(generations_mu);
  auto& next = generations[key_];
  next = std::max(next, generation_ + 1);
}

}  // namespace collie
