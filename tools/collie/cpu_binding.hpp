// Where the ranks of one node run: `collie launch --bind` and the ranks
// `collie bench` starts itself.
//
// With more ranks than processors, the kernel keeps moving them, and ranks
// that exchange messages often share a processor in one launch and not in
// the next, and a small all_reduce's time varies launch by launch; packed
// two to a processor, consecutive ranks keep it steady
// (docs/PERFORMANCE.md). With a processor each, unbound ranks on a busy
// machine (more runnable processes than processors) meet on one processor
// in about half the launches, and a small call then costs a wake-up
// (5 us against 0.5 us bound, docs/scale.md), so auto binds those too, to
// processors no other collie launcher of this machine holds
// (cpu_claims.hpp); with none free enough, it leaves them where the kernel
// puts them, as before.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cpu_claims.hpp"

namespace CLI {
class App;
}

namespace collie::cli {

enum class Binding {
  Auto,    // packed when the node's ranks outnumber the processors it may use; two or more
           // ranks that fit: one each, on unclaimed processors, else none
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
  // The processors claimed for them (auto with a processor each), held as
  // long as any copy of this placement lives.
  std::shared_ptr<const CpuClaims> claims;

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
// the host's. Auto with 2 to m ranks: rank i on the i-th processor no other
// launcher claims (in `claims_dir`, CpuClaims::default_dir() when empty),
// consecutive ones, so that they share caches; unbound where fewer are free.
Placement place_ranks(Binding b, int ranks, const std::string& claims_dir = {});

// Binds the calling thread (and the threads it starts later) to processor
// `cpu`; nothing for -1, and left unbound if the kernel refuses. One system
// call: async-signal-safe, for a child between fork() and exec().
void bind_to_cpu(int cpu);

}  // namespace collie::cli
