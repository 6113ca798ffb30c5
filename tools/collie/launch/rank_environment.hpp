// The environment `collie launch` gives each rank: torchrun's variables
// (MASTER_ADDR ... TORCHELASTIC_ERROR_FILE, ROLE_*, OMP_NUM_THREADS), the
// job's secret, and for torch programs the agent store and this build's
// collie_torch on PYTHONPATH.
#pragma once

#include <string>
#include <vector>

#include "args.hpp"

namespace collie::cli {

// What the environment of one rank depends on besides the job's options.
struct RankPlace {
  int rank = 0;
  int local_rank = 0;
  int node_rank = 0;
  int nodes = 1;
  int attempt = 0;
  std::string store_host;       // the store's, as the ranks reach it (MASTER_ADDR)
  int port = 0;                 // the store's, as the ranks reach it (MASTER_PORT)
  std::string token;            // the job's secret
  int shared_cpus = 0;          // bound ranks: how many processors they share (0: not bound)
  std::string error_file;       // TORCHELASTIC_ERROR_FILE
  std::string socket_ifname;    // COLLIE_SOCKET_IFNAME, "" to leave it
};

// "NAME=value" overrides for the rank's environment.
std::vector<std::string> rank_environment(const LaunchArgs& args, const RankPlace& place);

}  // namespace collie::cli
