// Child processes for tests of the collie CLI: start, read, signal, reap.
// Every wait has a timeout; a child still running at destruction is killed.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace collie::test {

struct RunResult {
  int exit_code = -1;  // 128 + signal number if it was killed by a signal
  std::string out;
  std::string err;
  bool timed_out = false;
};

class Subprocess {
 public:
  // Starts argv[0] (a path) with the current environment plus `env`
  // ("NAME=value" entries, which override). Standard input is `input`.
  Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
             const std::string& input = {});
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // The next line of standard output (without its newline); nullopt on EOF
  // or timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);

  // Waits until standard error holds `text` (anywhere in what was written
  // so far): true once it does, false on EOF or timeout.
  bool wait_for_stderr(const std::string& text, std::chrono::milliseconds timeout);

  void signal(int number);

  // Waits for the exit, reading the rest of both outputs. nullopt on timeout.
  std::optional<RunResult> wait(std::chrono::milliseconds timeout);

  pid_t pid() const { return pid_; }

 private:
  bool pump(std::chrono::milliseconds timeout);  // reads what is available; false at EOF of both
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_;
  std::string err_;
  std::size_t out_consumed_ = 0;
  std::optional<int> exit_code_;
};

// Runs a command to completion (or kills it after `timeout`).
RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env = {},
              const std::string& input = {},
              std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Runs `collie launch -n RANKS -- PROGRAM...` (collie at `collie_path`) to
// completion, with `env` added to the environment.
RunResult launch_ranks(const std::string& collie_path, int ranks,
                       const std::vector<std::string>& program,
                       const std::vector<std::string>& env = {},
                       std::chrono::milliseconds timeout = std::chrono::seconds(100));

}  // namespace collie::test
