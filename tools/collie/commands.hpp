// The subcommands of the collie CLI register themselves on the app here.
#pragma once

#include <CLI/CLI.hpp>

namespace collie::cli {

// Thrown by a subcommand to end the program with `code` after it has printed
// what it had to say (main catches it).
struct Exit {
  int code;
};

// `collie store serve|set|get|add|wait|check|delete|keys`
void add_store_command(CLI::App& app);

// `collie launch`
void add_launch_command(CLI::App& app);

// `collie bench store`
void add_bench_command(CLI::App& app);

}  // namespace collie::cli
