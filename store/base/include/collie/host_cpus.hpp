// How many processors a job may use on this host, for the decisions that
// depend on it (the cost model's crowding, shared memory's waits), and which
// ones this process may run on (where the launchers place ranks).
#pragma once

#include <vector>

namespace collie {

// The variable that tells ranks bound to one processor each how many
// processors the host's ranks share (collie launch and collie bench set it
// when they bind).
inline constexpr const char* kHostCpusVariable = "COLLIE_HOST_CPUS";

// The processors this process may run on (its affinity), ascending; empty
// if the kernel will not say.
std::vector<int> allowed_cpus();

// kHostCpusVariable when it is a positive number, else how many processors
// this process may run on (allowed_cpus()), at least 1.
int host_cpus();

}  // namespace collie
