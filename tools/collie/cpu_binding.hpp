// Where the ranks of one node run: `collie launch --bind` and the ranks
// `collie bench` starts itself.
//
// With more ranks than processors, the kernel keeps moving them, and ranks
// that exchange messages often share a processor in one launch and not in
// the next: 4 ranks on 2 processors took 33-58 us for a small all_reduce
// launch by launch, 34-37 us with consecutive ranks packed two to a
// processor (docs/PERFORMANCE.md). With a processor each, binding was
// slower (a rank's transport thread then shares its processor), so the
// default binds only when the ranks outnumber the processors.
#pragma once

#include <sched.h>
#include <string>
#include <vector>

namespace collie::cli {

enum class Binding {
  Auto,    // packed when the node's ranks outnumber the processors it may use, else none
  None,    // where the kernel puts them
  Packed,  // one processor each, consecutive ranks on the same one
};

// "auto", "none", "packed"; throws collie::Error naming the choices.
Binding parse_binding(const std::string& text);
const char* binding_name(Binding b);

// The processors this process may run on (its affinity mask), ascending.
std::vector<int> allowed_cpus();

// The processor for local rank `local` of `ranks`, or -1 to leave it
// unbound. Packed: rank i on cpus[i * m / ranks], m = cpus.size(), so
// consecutive ranks share a processor and the groups differ by one at most.
int cpu_for(Binding b, int local, int ranks, const std::vector<int>& cpus);

// "COLLIE_HOST_CPUS=K" for ranks bound so (K: the processors they share,
// <collie/host_cpus.hpp>), or "" when they are not bound or the variable is
// set already. Each bound rank's own affinity is one processor; the cost
// model and shared memory's waits must count the node's.
std::string host_cpus_variable(Binding b, int ranks, const std::vector<int>& cpus);

// A mask of that one processor, built before fork() so that the child
// only makes the system call (async-signal-safe).
cpu_set_t cpu_mask(int cpu);

}  // namespace collie::cli
