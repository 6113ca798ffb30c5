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
// `placement` (place_ranks, as `collie launch --bind` does) puts each rank
// on its processor, and tells bound ranks how many they share.
int run_standalone(int ranks, const Placement& placement, const std::function<int()>& rank_main);

// This machine's host name.
std::string host_name();

}  // namespace collie::cli
