// Where the ranks of one node run: `collie launch --bind` and the ranks
// `collie bench` starts itself.
//
// With more ranks than processors, the kernel keeps moving them, and ranks
// that exchange messages often share a processor in one launch and not in
// the next, and a small all_reduce's time varies launch by launch; packed
// two to a processor, consecutive ranks keep it steady
// (docs/PERFORMANCE.md). With a processor each, binding was
// slower (a rank's transport thread then shares its processor), so the
// default binds only when the ranks outnumber the processors.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace collie::cli {

enum class Binding {
  Auto,    // packed when the node's ranks outnumber the processors it may use, else none
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
  std::vector<int> cpu;  // by local rank: its processor, or -1 where unbound
  int shared = 0;        // the processors the bound ranks share; 0 when none is bound

  // Local rank `rank`'s processor, or -1.
  int cpu_of(int rank) const;
  // For a benchmark's header: "" when unbound, else ", bound packed to
  // processors 0 0 1 1".
  std::string describe() const;
};

// Places `ranks` local ranks on the processors this process may run on
// (allowed_cpus(), <collie/host_cpus.hpp>). Packed: rank i on
// cpus[i * m / ranks], m = cpus.size(), so consecutive ranks share a
// processor and the groups differ by one at most. Bound ranks learn how many
// processors they share through kHostCpusVariable: each one's own affinity
// is a single processor, and the cost model and shared memory's waits count
// the host's.
Placement place_ranks(Binding b, int ranks);

// Binds the calling thread (and the threads it starts later) to processor
// `cpu`; nothing for -1, and left unbound if the kernel refuses. One system
// call: async-signal-safe, for a child between fork() and exec().
void bind_to_cpu(int cpu);

}  // namespace collie::cli
