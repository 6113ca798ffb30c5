// Where the ranks of one node run: `collie launch --bind` and the ranks
// `collie bench` starts itself.
//
// With more ranks than processors, the kernel keeps moving them, and ranks
// that exchange messages often share a processor in one launch and not in
// the next, and a small all_reduce's time varies launch by launch; packed
// two to a processor, consecutive ranks keep it steady
// (docs/PERFORMANCE.md). With fewer, unbound ranks on a busy machine (more
// runnable processes than processors) met on one processor in about half
// the launches, and a small call then cost a wake-up (5 us against 0.5 us
// apart, docs/scale.md); so each rank gets a slice of the processors of its
// own, as Slurm's tasks get their cpus-per-task: two ranks never share one,
// and the threads and processes a rank starts (a data loader) have the
// slice's processors to themselves.
#pragma once

#include <sched.h>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace collie::cli {

enum class Binding {
  Auto,    // 2 or more ranks: slices, or packed where they outnumber the processors
  None,    // where the kernel puts them
  Packed,  // one processor each, consecutive ranks on the same one
};

// "auto", "none", "packed" (add_bind_option checks the choice first).
Binding parse_binding(const std::string& text);

// The --bind option of `collie launch` and `collie bench`, into `into`;
// `ranks` says whose ranks it places.
void add_bind_option(CLI::App& cmd, std::string& into, const std::string& ranks);

// Where each of a node's ranks runs, decided once, before any of them starts.
struct Placement {
  Binding binding = Binding::None;
  // By local rank: its processors (ascending), or none where unbound.
  std::vector<std::vector<int>> cpus;
  int shared = 0;  // the processors the bound ranks share; 0 when none is bound

  // Local rank `rank`'s processors as a set for sched_setaffinity(); false
  // where it is unbound.
  bool set_of(int rank, cpu_set_t& set) const;
  // For a benchmark's header: "" when unbound, else ", bound auto to
  // processors 0-3 4-7" or ", bound packed to processors 0 0 1 1".
  std::string describe() const;
};

// Places `ranks` local ranks on `cpus`, the processors this process may run
// on (allowed_cpus(), <collie/host_cpus.hpp>), m = cpus.size():
// - packed, or auto with more ranks than processors: rank i on
//   cpus[i * m / ranks], so consecutive ranks share a processor and the
//   groups differ by one at most;
// - auto with 2 to m ranks: rank i on cpus[i * m / ranks] up to
//   cpus[(i + 1) * m / ranks], a slice of its own (one processor each where
//   ranks = m, as Open MPI binds 2 ranks to a core each);
// - auto with one rank, or none: unbound.
// Bound ranks learn how many processors they share through
// kHostCpusVariable: each one's own affinity is its slice, and the cost
// model and shared memory's waits count the host's.
Placement place_ranks(Binding b, int ranks, const std::vector<int>& cpus);
Placement place_ranks(Binding b, int ranks);  // on allowed_cpus()

// Binds the calling thread (and the threads it starts later) to `set`;
// nothing for nullptr, and left unbound if the kernel refuses. One system
// call: async-signal-safe, for a child between fork() and exec().
void bind_to(const cpu_set_t* set);

}  // namespace collie::cli
