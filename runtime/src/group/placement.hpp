// Where a job's ranks run, as far as Auto's cost model needs it: how many
// share rank 0's machine and how many cores they have there.
#pragma once

#include <string>

namespace collie {

// This machine's identity for as long as it runs (the kernel's boot id):
// two processes with the same one share its cores.
std::string machine_id();

// The cores this process's job may use on this host (host_cpus(): the
// launcher's COLLIE_HOST_CPUS where it bound each rank to one, else this
// process's CPU affinity), capped by a cgroup v2 CPU quota (cpu.max) when
// one is set. At least 1.
int usable_cores();

// This machine's caches for the cost model (CostModel::core_cache_bytes,
// cache_bytes): each core's (L2) and the one its cores share (L3), in
// bytes, as the kernel reports them for cpu 0; 0 where it reports none.
struct CacheSizes {
  double core = 0;
  double host = 0;
};
CacheSizes cache_sizes();

// Ranks per core for the cost model (CostModel::crowding): `host_ranks`
// of the job's ranks share `cores` cores, and a group of `group_size`
// ranks has at most that many of them there.
double crowding(int host_ranks, int cores, int group_size);

}  // namespace collie
