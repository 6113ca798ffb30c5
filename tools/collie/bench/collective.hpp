// What `collie bench <collective>|all` measures and prints, shared by the
// measuring (bench/collective.cpp) and the output (bench/output.cpp): the
// command line, one measured cell, and nccl-tests' bus-bandwidth factors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <collie/process_group.hpp>

namespace collie::cli {

using collectives::Algorithm;
using collectives::Collective;

// The command line.
struct Args {
  std::vector<Collective> collectives;  // one, or every one for `all`
  std::string name;                     // "all_reduce" or "all"
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2;
  std::size_t step_bytes = 0;  // > 0: add this instead of multiplying
  int iters = 20;
  int warmup = 5;
  int check = 1;
  bool barrier_each = false;  // a barrier before every timed iteration, outside the timing
  std::string op = "sum";
  std::string dtype = "float32";
  int root = 0;
  std::vector<std::string> algos{"auto"};
  int ranks = 2;              // stand-alone only
  std::string bind = "auto";  // stand-alone only: cpu_binding.hpp
  bool json = false;
  bool csv = false;
  bool progress = false;
  std::string plot;
  std::vector<std::string> baselines;
  std::string device = "host";  // or "cuda": buffers in device memory
};

inline bool several_algorithms(const Args& a) {
  return a.algos.size() > 1 || (a.algos.size() == 1 && a.algos[0] == "all");
}

// One measured cell: a size, an algorithm and a placement.
struct Result {
  Collective collective;
  std::string algorithm;  // as asked ("auto" or a name)
  std::string chosen;     // what ran
  std::size_t bytes = 0;
  std::size_t count = 0;  // elements, as nccl-tests counts them
  bool in_place = false;
  double time_us = 0;  // the mean over the calls on each rank, the maximum across ranks
  double rank0_median_us = 0;  // the median call, each timed by itself (rank 0's where printed)
  double algbw = 0;
  double busbw = 0;
  std::size_t wrong = 0;
  double host_time_us = 0;  // --device cuda: the same cell on host buffers
};

// What staging costs: device time against host time, in percent.
inline double staging_percent(const Result& r) {
  return r.host_time_us > 0 ? (r.time_us / r.host_time_us - 1) * 100 : 0;
}

// ---- nccl-tests' factors ----

// nccl-tests' bus bandwidth factors: what each rank's busiest link carries,
// relative to the buffer size.
inline double bus_factor(Collective c, int n) {
  const double r = static_cast<double>(n);
  switch (c) {
    case Collective::AllReduce:
      return 2 * (r - 1) / r;
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
    case Collective::Gather:
    case Collective::Scatter:
      return (r - 1) / r;
    case Collective::Broadcast:
    case Collective::Reduce:
      return 1;
    case Collective::Barrier:
      return 0;
  }
  return 0;
}

inline std::string_view bus_factor_text(Collective c) {
  switch (c) {
    case Collective::AllReduce:
      return "2(n-1)/n";
    case Collective::Broadcast:
    case Collective::Reduce:
      return "1";
    case Collective::Barrier:
      return "0 (no data)";
    default:
      return "(n-1)/n";
  }
}

// Collectives whose size counts n blocks (nccl-tests: the larger buffer).
inline bool blocked(Collective c) {
  return c == Collective::AllGather || c == Collective::ReduceScatter ||
         c == Collective::AllToAll || c == Collective::Gather || c == Collective::Scatter;
}

}  // namespace collie::cli
