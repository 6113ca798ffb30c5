// What the launchers tell a rank (torchrun's and collie launch's, Slurm's
// and Open MPI's variables): its rank and world size, and, under srun or
// mpirun without MASTER_ADDR or MASTER_PORT, the store's address inferred
// from the job (rank 0's node, a port derived from the job's id). Part of
// resolve_job_config() (job_config.hpp); pure functions of the lookup.
#pragma once

#include <optional>
#include <string>

#include <collie/job_config.hpp>

namespace collie::detail {

// One family of launcher variables.
struct LauncherFamily {
  const char* name;  // "Slurm"
  const char* rank;
  const char* world_size;
  const char* local_rank;
};

// The first family that sets a rank (torchrun / collie launch, then Slurm,
// then Open MPI); null if none does.
const LauncherFamily* launcher_family(const EnvironmentLookup& lookup);

// Sets config.rank, world_size, local_rank and rank_source from the
// options, else `family`'s variables, and checks them. Throws
// collie::Error naming what to set.
void resolve_rank(const InitOptions& options, const EnvironmentLookup& lookup,
                  const LauncherFamily* family, JobConfig& config);

// env://: sets config.master_addr and master_port from MASTER_ADDR and
// MASTER_PORT, inferring what srun or mpirun leave unset (and
// config.port_source when the port is derived). Throws collie::Error
// naming what to set.
void resolve_store_address(const EnvironmentLookup& lookup, const LauncherFamily* family,
                           JobConfig& config);

// "collie::init: NAME='text' is not an integer" unless `text` is one.
int parse_int(const std::string& text, const std::string& what);

}  // namespace collie::detail
