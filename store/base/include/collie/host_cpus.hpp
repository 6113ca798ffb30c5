// How many processors a job may use on this host, for the decisions that
// depend on it (the cost model's crowding, shared memory's waits), and which
// ones this process may run on (where the launchers place ranks).
#pragma once

#include <vector>

namespace collie {

// The processors this process may run on (its affinity), ascending; empty
// if the kernel will not say.
std::vector<int> allowed_cpus();

// COLLIE_HOST_CPUS (environment.hpp) when it is a positive number, else how many processors
// this process may run on (allowed_cpus()), at least 1.
int host_cpus();

}  // namespace collie
