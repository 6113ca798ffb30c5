// How many processors a job may use on this host, for the decisions that
// depend on it (the cost model's crowding, shared memory's waits).
#pragma once

namespace collie {

// COLLIE_HOST_CPUS when it is a positive number (collie launch and collie
// bench set it when they bind each rank to one processor: the processors
// the host's ranks share, where each rank alone may run on one), else the
// processors this process may run on (its affinity), at least 1.
int host_cpus();

}  // namespace collie
