// How a benchmark's ranks come to be: inside a job (collie launch, srun,
// mpirun: the environment says who is who), or stand-alone, where the
// benchmark starts its own ranks on this machine.
#pragma once

#include <functional>
#include <string>

#include "cpu_binding.hpp"

namespace collie::cli {

// Whether the environment names this process's rank (RANK, SLURM_PROCID,
// OMPI_COMM_WORLD_RANK).
bool inside_a_job();

// Runs `rank_main` as every rank of a job of `ranks` processes on this
// machine: forks ranks 1 to ranks-1 (call it before any thread exists), hosts
// the store on a free loopback port, and runs rank 0 in this process. Returns
// rank 0's exit code, or 1 where rank 0 succeeded and another rank did not.
// When rank 0 fails, the others get SIGTERM rather than wait out the timeout.
// `binding` places each rank as `collie launch --bind` does (cpu_binding.hpp).
int run_standalone(int ranks, Binding binding, const std::function<int()>& rank_main);

// How run_standalone places `ranks` ranks, for a benchmark's header:
// "" when unbound, else ", bound packed to processors 0 0 1 1".
std::string placement_text(int ranks, Binding binding);

// This machine's host name.
std::string host_name();

}  // namespace collie::cli
