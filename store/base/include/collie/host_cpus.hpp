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

// The processors online on this machine, whatever this process's affinity.
int online_cpus();

// The tasks the kernel has ready to run on this machine right now, the
// caller among them (/proc/loadavg's fourth field: every namespace and
// container of the machine), or -1 where it will not say.
int runnable_tasks();

// Whether other work fills this machine's processors: of `runnable` tasks
// (runnable_tasks(), the caller among them), at least `cpus` are not among
// this job's `job_ranks` ranks here. Then a rank that waits by spinning or
// yielding loses its processor to that work for a whole time slice; one
// that sleeps is woken ahead of it. Unknown (-1): not busy.
bool machine_busy(int runnable, int job_ranks, int cpus);

}  // namespace collie
