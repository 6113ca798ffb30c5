// `collie bench`: its kinds, each in a file of this folder (commands.hpp).
#include "commands.hpp"

namespace collie::cli {

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench",
                                   "Benchmark collie: collectives over a sweep of sizes (as "
                                   "nccl-tests), p2p, reduce kernels, the store");
  bench->require_subcommand(1);
  add_bench_collective_commands(*bench);
  add_bench_p2p_command(*bench);
  add_bench_buckets_command(*bench);
  add_bench_kernels_command(*bench);
  add_bench_store_command(*bench);
}

}  // namespace collie::cli
