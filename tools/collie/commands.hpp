// The subcommands of the collie CLI register themselves on the app here.
#pragma once

#include <CLI/CLI.hpp>

namespace collie::cli {

// Thrown by a subcommand to end the program with `code` after it has printed
// what it had to say (main catches it).
struct Exit {
  int code;
};

// `collie store serve|set|get|add|wait|check|delete|keys` (store/command.cpp)
void add_store_command(CLI::App& app);

// `collie launch` (launch/command.cpp)
void add_launch_command(CLI::App& app);

// `collie bench <collective>|all|store|p2p|kernels` (bench/command.cpp)
void add_bench_command(CLI::App& app);
// `collie bench <collective>|all` (bench/collective.cpp), added by add_bench_command.
void add_bench_collective_commands(CLI::App& bench);
// `collie bench p2p` (bench/p2p.cpp), added by add_bench_command.
void add_bench_p2p_command(CLI::App& bench);
// `collie bench buckets` (bench/buckets.cpp), added by add_bench_command.
void add_bench_buckets_command(CLI::App& bench);
// `collie bench kernels` (bench/kernels.cpp), added by add_bench_command.
void add_bench_kernels_command(CLI::App& bench);
// `collie bench store` (bench/store.cpp), added by add_bench_command.
void add_bench_store_command(CLI::App& bench);

// `collie explain <collective>` (explain/command.cpp)
void add_explain_command(CLI::App& app);

// `collie trace merge` (trace/command.cpp)
void add_trace_command(CLI::App& app);

}  // namespace collie::cli
