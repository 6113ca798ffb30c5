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

class Hosts {
 public:
  Hosts() = default;
  // [group rank] its host, numbered 0, 1, ... (any order; gaps not
  // allowed). Throws collie::Error on a negative number or a gap. What the
  // schedules ask (each host's ranks, the ring's order, a rank's place in
  // it) is worked out here once, so a schedule built for one rank of
  // thousands reads it instead of searching the whole group.
  explicit Hosts(std::vector<int> host_of);
  // Each rank a host of its own (the hosts are not known).
  static Hosts one_per_rank(int world);

  const std::vector<int>& host_of() const { return host_of_; }
  int host_of(int rank) const { return host_of_[static_cast<std::size_t>(rank)]; }
  int ranks() const { return static_cast<int>(host_of_.size()); }
  int hosts() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& ranks_on(int host) const {  // ascending
    return members_[static_cast<std::size_t>(host)];
  }
  // A rank's index among its host's ranks.
  int local_index(int rank) const { return local_[static_cast<std::size_t>(rank)]; }
  // The ranks by host, then by rank: the order a ring takes, so that it
  // crosses from one host to the next once per host, however the ranks are
  // numbered (the identity when each host's ranks are consecutive).
  const std::vector<int>& ring_order() const { return order_; }
  int position(int rank) const { return position_[static_cast<std::size_t>(rank)]; }
  // Whether ring_order() is the identity (each host's ranks consecutive).
  bool by_host() const { return by_host_; }
  // The most ranks on one host.
  int most_per_host() const { return most_; }

 private:
  std::vector<int> host_of_;
  std::vector<std::vector<int>> members_;
  std::vector<int> local_, order_, position_;
  bool by_host_ = true;
  int most_ = 0;
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
