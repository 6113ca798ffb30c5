// collie: launch jobs, serve the rendezvous store, benchmark, explain.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include <exception>

#include <CLI/CLI.hpp>

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/memory.hpp>
#include <collie/version.hpp>

#include "commands.hpp"
#include "launch/torchrun_args.hpp"

int main(int argc, char** argv) {
  CLI::App app(
      "collie: collective communication over plain TCP.\n"
      "Launch jobs, serve and query the rendezvous store, benchmark collectives, explain their\n"
      "algorithms step by step, and merge traces.",
      "collie");
  // (A function: the CUDA driver is loaded only when --version asks.)
  app.set_version_flag(
      "--version",
      [] { return std::string("collie ") + collie::version() + "\n" + collie::cuda::status(); },
      "Print the version and whether CUDA device buffers are built in and usable, then exit");
  app.require_subcommand(1);
  // The environment's part of the help is the settings' table
  // (collie/environment.hpp), which docs/environment.md shows whole.
  std::string footer =
      "Environment (docs/environment.md says what each one does):\n"
      "  MASTER_ADDR, MASTER_PORT   the store's address when --addr is not given\n";
  for (const auto* v : collie::environment::kVariables)
    footer += fmt::format("  {:<26} {}{}\n", v->name, collie::environment::takes(*v),
                          v->fallback.empty() ? "" : fmt::format("; default {}", v->fallback));
  footer += "Run 'collie SUBCOMMAND --help' for each subcommand's options.";
  app.footer(footer);
  collie::cli::add_launch_command(app);
  collie::cli::add_store_command(app);
  collie::cli::add_bench_command(app);
  collie::cli::add_explain_command(app);
  collie::cli::add_trace_command(app);

  try {
    // torchrun's spelling of `collie launch` (launch/torchrun_args.hpp); CLI11
    // takes the words last first.
    std::vector<std::string> words(argv + 1, argv + argc);
    collie::cli::normalize_launch_words(words, *app.get_subcommand("launch"));
    std::reverse(words.begin(), words.end());
    app.parse(words);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const collie::cli::Exit& e) {
    return e.code;
  } catch (const collie::Error& e) {
    std::fprintf(stderr, "collie: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collie: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
