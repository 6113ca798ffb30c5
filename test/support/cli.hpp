// The collie CLI in a test: where the built one is, and `collie COMMAND
// ARGS...` run to completion (subprocess.hpp's run()). For the tests built
// for collie_cli_tests (build_paths.hpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "support/build_paths.hpp"
#include "support/subprocess.hpp"

namespace collie::test {

inline const std::string kCollie = paths::kCli;

// `collie COMMAND ARGS...`, with `env` added to the environment and `input`
// on its standard input; killed (timed_out) after `timeout`.
inline RunResult collie_cli(const std::string& command, const std::vector<std::string>& args,
                            const std::vector<std::string>& env = {},
                            std::chrono::milliseconds timeout = std::chrono::seconds(60),
                            const std::string& input = {}) {
  std::vector<std::string> argv = {kCollie, command};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, env, input, timeout);
}

}  // namespace collie::test
