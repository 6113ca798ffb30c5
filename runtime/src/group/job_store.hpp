// JobStore: the rendezvous store of a job, from its JobConfig.
//
//   JobStore job(collie::resolve_job_config());
//   job.store().set("addr/" + std::to_string(rank), "...");
//
// Who hosts the store: `collie launch` when it started this process
// (COLLIE_STORE_HOSTED=1); otherwise rank 0, which starts a StoreServer on
// MASTER_PORT on every interface before connecting to it, like torch's
// TCPStore. With file:// every rank opens the shared file. Every rank's
// client retries until the store is up, for the job's timeout.
//
// Rank 0's store stays up after its group is destroyed (one that every rank
// joined), until the process exits: the others may still be leaving the
// group, or already joining the next, and a JobStore made again on the same
// port takes it over. If rank 0
// exits (or dies), the other ranks' calls fail at once with a
// ConnectionError naming the store's address: nobody is left waiting
// without an error.
//
// store() is a view of the namespace "collie/run/<restart count>/", so a job
// restarted by `collie launch --max-restarts` never reads its previous
// attempt's keys. A process that makes its group again after destroying
// one that joined (torch's destroy_process_group, then init_process_group)
// gets "collie/run/<restart count>/gen/<n>/" for its n-th: a JobStore that
// saw its group join counts it (joined()) for the next one of the same rank
// on the same store. Ranks that make their groups again in step agree on n.
#pragma once

#include <memory>
#include <string>

#include <collie/job_config.hpp>
#include <collie/store/server.hpp>
#include <collie/store/store.hpp>

namespace collie {

class JobStore {
 public:
  // Hosts and/or connects to the store. Throws collie::Error (ConnectionError,
  // TimeoutError, AuthenticationError...) naming the address or file.
  explicit JobStore(const JobConfig& config);
  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // The job's namespace in the store.
  store::Store& store() { return *view_; }
  std::shared_ptr<store::Store> shared_store() const { return view_; }

  // The run's namespace whatever the generation ("collie/run/<restart>/"):
  // where newcomers wait for an expand() (expand.cpp), and are admitted.
  std::shared_ptr<store::Store> run_store() const { return run_; }

  // True if this process runs the store's server; and the server.
  bool hosts_server() const { return server_ != nullptr; }
  store::StoreServer* server() const { return server_.get(); }

  // The namespace store() is a view of ("collie/run/0", "collie/run/0/gen/1":
  // keys::run()).
  const std::string& prefix() const { return prefix_; }
  // Every rank joined the group made with this store: the next JobStore of
  // this rank on this store, once this one is gone, takes the next namespace.
  void joined() { joined_ = true; }

 private:
  std::shared_ptr<store::StoreServer> server_;  // shared with the next group (job_store.cpp)
  std::shared_ptr<store::Store> view_;
  std::shared_ptr<store::Store> run_;
  std::string key_;     // the store and the rank, for the generations
  int generation_ = 0;  // groups this rank made on this store before
  std::string prefix_;
  bool joined_ = false;
};

}  // namespace collie
