// Where a process finds its job: its rank, the world size, and the store.
//
// collie::init() (process_group.hpp) starts here: it resolves
// an init method and the environment into a JobConfig, failing at once with
// a message that names the variable to set when something is missing or
// contradictory.
//
// Init methods:
//   env://              (default) MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
//                       LOCAL_RANK, as torchrun and `collie launch` set them;
//                       else Slurm's SLURM_PROCID, SLURM_NTASKS,
//                       SLURM_LOCALID; else Open MPI's
//                       OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK. Under
//                       srun or mpirun, MASTER_ADDR defaults to 127.0.0.1
//                       when every rank is on one node, else (Slurm) to the
//                       first host of SLURM_STEP_NODELIST; MASTER_PORT to a
//                       port derived from the job's id (and Slurm's step
//                       id) in COLLIE_PORT_RANGE (default 20000-29999):
//                       docs/slurm.md.
//   tcp://HOST:PORT     the store's address; rank and world size from the
//                       options or the environment as above.
//   file:///PATH        a file-based store on a shared file system; rank and
//                       world size as above.
//   etcd://HOST:PORT[,HOST:PORT...]/JOB
//                       the job's keys in an etcd cluster (under /collie/JOB/),
//                       over TLS with the client certificate of
//                       COLLIE_ETCD_CACERT, _CERT, _KEY (or plain HTTP with
//                       COLLIE_ETCD_INSECURE=1); nobody hosts a store, so any
//                       rank may be lost without losing it. Rank and world
//                       size as above.
// A program that already has a store (torch's, handed to the collie backend
// for torch.distributed) passes it in InitOptions::store instead: the ranks
// meet there, under "collie/", and nobody hosts a store for them.
// Also read: collie's own settings, the COLLIE_* variables, each checked
// by its entry in the table of <collie/environment.hpp> (its default, what
// it accepts, what it means; docs/environment.md shows the table).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <memory>

#include <collie/address.hpp>
#include <collie/environment.hpp>
#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/selection.hpp>
#include <collie/transport/settings.hpp>

namespace collie {

namespace store {
class Store;
}

struct InitOptions {
  std::string init_method = "env://";
  std::optional<int> rank;                           // overrides the environment
  std::optional<int> world_size;                     // overrides the environment
  std::optional<std::chrono::milliseconds> timeout;  // overrides COLLIE_TIMEOUT
  std::optional<std::string> socket_ifname;          // overrides COLLIE_SOCKET_IFNAME
  std::optional<std::string> token;                  // overrides COLLIE_STORE_TOKEN
  std::optional<std::string> algorithms;             // overrides COLLIE_ALGO
  std::optional<std::size_t> segment_bytes;          // overrides COLLIE_SEGMENT_BYTES
  std::optional<std::size_t> stage_whole_bytes;      // overrides COLLIE_STAGE_WHOLE_BYTES
  std::optional<std::size_t> stage_chunk_bytes;      // overrides COLLIE_STAGE_CHUNK_BYTES
  std::optional<std::chrono::microseconds> spin;     // overrides COLLIE_SPIN_US
  std::optional<std::string> transport;              // overrides COLLIE_TRANSPORT
  std::optional<std::string> trace_dir;              // overrides COLLIE_TRACE ("": off)
  std::optional<std::chrono::milliseconds> stall_time;  // overrides COLLIE_STALL_TIME (0: off)
  std::optional<int> async_calls;                       // overrides COLLIE_ASYNC_CALLS
  // Join a running job as a newcomer (overrides COLLIE_JOIN): init() waits
  // until the job's members admit this process at their next
  // ProcessGroup::expand(), and returns the group they made with it, where
  // it is numbered after them. The job's store is found as for a start
  // (init_method, or `store`); rank and world_size are not needed.
  std::optional<bool> join;
  // etcd://: how to reach etcd (override COLLIE_ETCD_CACERT, _CERT, _KEY, _INSECURE).
  std::optional<std::string> etcd_cacert, etcd_cert, etcd_key;
  std::optional<bool> etcd_insecure;

  // Meet the other ranks in this store rather than one init_method names
  // (init_method is then ignored; rank and world_size come from the options
  // or the environment as above). Stall reports are off: they need a
  // store collie serves.
  std::shared_ptr<store::Store> store;
  // With `store`: a name for it that every rank gives alike (its address
  // and namespace), so that a group made again on it after one that joined
  // takes a fresh namespace, as JobStore does; empty: always "collie/run/0".
  std::string store_name;
  // With `store`: a host on the way to the other ranks, whose route picks
  // the interface this rank advertises (the store's host); empty:
  // MASTER_ADDR, else the first address that is not loopback.
  std::string route_to;
  // With `store`: "HOST:PORT" when a collie store serves it (collie_torch
  // under collie launch), its keys under `store_key_prefix` there ("" for
  // none). Stall reports are then on: the stall inspector reaches that
  // store itself, with the token.
  std::string store_served_at;
  std::string store_key_prefix;
};


struct JobConfig {
  enum class Method { Env, Tcp, File, Etcd, Given };  // Given: InitOptions::store
  Method method = Method::Env;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr;        // env:// and tcp://
  std::uint16_t master_port = 0;  // env:// and tcp://
  // Where the port came from when collie chose it (under srun or mpirun
  // without MASTER_PORT), for messages; empty when it was given.
  std::string port_source;
  std::string file_path;          // file://
  // etcd://: the members ("host:port"), the job's name, how to reach them.
  std::vector<std::string> etcd_endpoints;
  std::string etcd_job;
  std::string etcd_cacert, etcd_cert, etcd_key;  // COLLIE_ETCD_CACERT, _CERT, _KEY
  bool etcd_insecure = false;                    // COLLIE_ETCD_INSECURE
  std::shared_ptr<store::Store> given_store;  // Method::Given
  std::string given_store_name;               // Method::Given (InitOptions::store_name)
  // Method::Given: a collie store at master_addr:master_port serves it, its
  // keys under this prefix there (InitOptions::store_served_at).
  bool given_served = false;
  std::string given_key_prefix;
  bool store_hosted_by_launcher = false;
  int restart_count = 0;
  bool join = false;  // a newcomer to a running job (InitOptions::join, COLLIE_JOIN)
  std::chrono::milliseconds timeout{
      static_cast<long long>(environment::default_number(environment::kTimeout) * 1000)};
  std::string socket_ifname;  // as given; empty: the interface that routes to the master
  std::string lane_ifname = "auto";  // COLLIE_LANE_IFNAME: lanes' other interfaces
  std::string token;
  std::string rank_source;        // which variables the rank came from, for messages
  // COLLIE_ALGO's rules (collectives/selection.hpp: the algorithm for each
  // collective, by size and ranks; Auto for every call they leave).
  collectives::SelectionRules algorithms;
  // The defaults below are the variables' table's (collie/environment.hpp).
  std::size_t segment_bytes = environment::default_bytes(environment::kSegmentBytes);
  std::size_t stage_whole_bytes = environment::default_bytes(environment::kStageWholeBytes);
  std::size_t stage_chunk_bytes = environment::default_bytes(environment::kStageChunkBytes);
  // The link between hosts, for Auto's choice in a group that spans hosts
  // (COLLIE_HOST_LINK="GBITS[,LATENCY_US]", e.g. "1,50"): its rate in Gbit/s
  // and one message's latency. Where the variable is not set
  // (host_link_given false), init measures the link instead
  // (runtime/src/bootstrap/link_probe.hpp) and these defaults stand only where it
  // cannot (one host, hosts not known).
  double host_link_gbits = 10;
  double host_link_latency_us = 30;
  bool host_link_given = false;
  // What carries messages and how (COLLIE_TRANSPORT, COLLIE_SPIN_US,
  // COLLIE_SHM_SINGLE_COPY, COLLIE_SHM_STORES): transport/settings.hpp.
  transport::TransportSettings transport;
  // Where every rank writes its Chrome trace (COLLIE_TRACE); empty: no trace.
  std::string trace_dir;
  // How long a call waits before the ranks are asked who holds it up
  // (COLLIE_STALL_TIME, seconds; 0: never). See the stall inspector in
  // docs/failures.md.
  std::chrono::milliseconds stall_time{
      static_cast<long long>(environment::default_number(environment::kStallTime) * 1000)};
  // How many of a group's async collectives run at once (COLLIE_ASYNC_CALLS).
  int async_calls = static_cast<int>(environment::default_number(environment::kAsyncCalls));
};

// Looks up one environment variable (nullopt when unset or empty).
using EnvironmentLookup = std::function<std::optional<std::string>(std::string_view)>;

// Resolves options and environment into a JobConfig. Throws collie::Error
// naming what to set (or what contradicts what) on any problem.
JobConfig resolve_job_config(const InitOptions& options, const EnvironmentLookup& lookup);

// The same, reading this process's environment.
JobConfig resolve_job_config(const InitOptions& options = {});

// The first host of a Slurm node list: "node[07-09,12],gpu1" -> "node07".
// Throws collie::Error on a list it cannot read.
std::string first_host_of_nodelist(std::string_view nodelist);

}  // namespace collie
