// Which host each rank of a group runs on: what the host-aware schedules
// (rings ordered by host, two_level.hpp), the cost model and `collie
// explain` know of the cluster. The runtime fills it in when a group is
// made (every rank's transport::host_identity(), numbered by rank 0);
// explain makes one from --hosts and --ranks-per-host.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace collie::collectives {

struct Hosts {
  // [group rank] its host: 0, 1, ... numbered in the order of each host's
  // lowest rank.
  std::vector<int> host_of;

  int hosts() const;                     // how many
  std::vector<int> ranks_on(int host) const;  // ascending
  // The ranks by host, then by rank: the order a ring takes, so that it
  // crosses from one host to the next once per host, however the ranks are
  // numbered (the identity when each host's ranks are consecutive).
  std::vector<int> ring_order() const;
  // The most ranks on one host.
  int most_per_host() const;
};

// Numbers hosts from each rank's host name (equal names: one host).
Hosts hosts_from_names(const std::vector<std::string>& names);
// `hosts` hosts of `ranks_per_host` ranks: by host (ranks 0 .. L-1 on host
// 0) or round robin (rank r on host r % hosts), as `srun --distribution`
// block and cyclic place them.
Hosts uniform_hosts(int hosts, int ranks_per_host, bool round_robin);
// Each host's rank count given ("3,1,2"), ranks by host.
Hosts hosts_of_sizes(const std::vector<int>& sizes);
// The hosts of a group of `members` (its ranks in `hosts`' numbering),
// numbered afresh.
Hosts hosts_of_members(const Hosts& hosts, const std::vector<int>& members);
// "4 hosts x 2 ranks, by host", "3 hosts (3, 1, 2 ranks), round robin", ...
std::string describe(const Hosts& hosts);

}  // namespace collie::collectives
