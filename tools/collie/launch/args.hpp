// What `collie launch` was given (its options, torchrun's among them), and
// what the launcher makes of them (launch/torchrun_args.hpp resolves them).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace collie::cli {

struct LaunchArgs {
  std::string nproc = "1";  // N, auto, cpu or gpu
  std::string nnodes = "1";  // N or MIN:MAX
  std::optional<int> node_rank;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;
  bool standalone = false;
  std::string port_file;
  int max_restarts = 0;
  double monitor_interval_s = 0.1;
  std::string start_method;
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  std::string tee;        // torchrun's spec ("3", "0:1,1:2"); "" none
  std::string redirects;  // the same, for output that goes to the log only
  std::string local_ranks_filter;
  std::string local_addr;
  std::string log_dir = "collie-logs";
  double stop_timeout_s = 5;
  double node_timeout_s = 60;   // a node's launcher silent this long has failed
  double join_timeout_s = 300;  // torchrun's join_timeout: waiting for the nodes to join
  std::string token_file;     // the job's secret; see Launcher::resolve_token()
  bool insecure = false;      // several nodes without a secret
  bool master_worker = false;  // a worker's failure is rank 0's to handle (collie::mw)
  bool keep_going = false;     // a rank's failure stops no one: the others shrink and go on
  std::string bind = "auto";  // cpu_binding.hpp
  std::vector<std::string> command;  // the program and its arguments (never empty once resolved)

  // torchrun's --rdzv-conf keys that collie honours
  double last_call_s = 30;    // last_call_timeout: MIN:MAX waits this long for more nodes
  std::optional<bool> is_host;  // is_host: this node hosts the store (c10d)
  // etcd's (launch/etcd_args.hpp): protocol, cacert, cert, key
  std::string etcd_protocol;
  std::string etcd_cacert, etcd_cert, etcd_key;

  // ---- resolved by resolve_torchrun()
  int nproc_count = 1;
  int nnodes_min = 1;
  int nnodes_max = 1;
  int node_rank_value = 0;  // -1: to be given by the rendezvous (c10d, etcd)
  // --rdzv-backend etcd (or etcd-v2): the launchers meet in etcd, each
  // round's node 0 hosts the ranks' store; etcd's members.
  bool etcd = false;
  std::vector<std::string> etcd_endpoints;
  bool host_store = false;  // this node is to host the store (node 0, or c10d's host)
  int port = 0;  // the store's: --master-port, else 29500 on several nodes, 0 (a free one) on one
  std::vector<int> tee_streams;       // per local rank: 1 stdout, 2 stderr, 3 both
  std::vector<int> redirect_streams;  // the same, for the log only
  std::vector<bool> shown;            // per local rank: its output on the console
  std::string socket_ifname;          // from --local-addr: COLLIE_SOCKET_IFNAME for the ranks
  bool omp_threads_one = false;       // OMP_NUM_THREADS=1 for the ranks, as torchrun sets it
  std::vector<std::string> notes;     // to say once, before the ranks start
};

}  // namespace collie::cli
