// A child process of `collie launch`: started with extra environment, its
// standard output and error captured through non-blocking pipes.
#pragma once

#include <sched.h>
#include <string>
#include <sys/types.h>
#include <vector>

namespace collie::cli {

class ChildProcess {
 public:
  // Starts argv (argv[0] is looked up in PATH) with the current environment
  // plus `env` ("NAME=value", overriding). Standard input is /dev/null; every
  // signal is unblocked in the child, which leads a process group of its own
  // (signal it with kill(-pid, ...) to reach its descendants too). Throws collie::Error naming the
  // program if it cannot be started (not found, not executable...). With
  // `cpus` the child is bound to those processors before it starts the
  // program (bind_to, cpu_binding.hpp).
  ChildProcess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
               const cpu_set_t* cpus = nullptr);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // -1 once the stream is at its end and closed.
  int out_fd() const { return out_fd_; }
  int err_fd() const { return err_fd_; }
  void close_out();
  void close_err();

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
};

// "exit code 3", "killed by SIGKILL" for a wait status.
std::string describe_wait_status(int status);

// The exit code a shell would report for a wait status (128 + signal).
int exit_code_of(int status);

}  // namespace collie::cli
