// Child processes a test starts and reads the output of (subprocess.hpp).
#include "subprocess.hpp"

#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdexcept>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include "collie/launch/exec_args.hpp"  // tools/collie/launch/

namespace collie::test {

namespace {

using Clock = std::chrono::steady_clock;

void check(int rc, const char* what) {
  if (rc < 0) throw std::runtime_error(std::string(what) + ": " + std::strerror(errno));
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace

Subprocess::Subprocess(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const std::string& input) {
  int out[2], err[2], in[2];
  check(pipe2(out, O_CLOEXEC), "pipe");
  check(pipe2(err, O_CLOEXEC), "pipe");
  check(pipe2(in, O_CLOEXEC), "pipe");

  collie::cli::ExecArgs exec(argv, env);
  auto& args = exec.argv;
  auto& envp = exec.envp;

  pid_ = fork();
  check(pid_, "fork");
  if (pid_ == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execve(args[0], args.data(), envp.data());
    std::fprintf(stderr, "exec %s failed: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  close(in[0]);
  out_fd_ = out[0];
  err_fd_ = err[0];
  // Small inputs only (tests): fits in the pipe buffer, so this cannot block.
  if (!input.empty()) {
    if (write(in[1], input.data(), input.size()) != static_cast<ssize_t>(input.size())) {
      close(in[1]);
      throw std::runtime_error("subprocess: could not write its input");
    }
  }
  close(in[1]);
}

Subprocess::~Subprocess() {
  if (!exit_code_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
  }
  if (out_fd_ >= 0) close(out_fd_);
  if (err_fd_ >= 0) close(err_fd_);
}

bool Subprocess::pump(std::chrono::milliseconds timeout) {
  pollfd fds[2];
  int n = 0;
  if (out_fd_ >= 0) fds[n++] = {out_fd_, POLLIN, 0};
  if (err_fd_ >= 0) fds[n++] = {err_fd_, POLLIN, 0};
  if (n == 0) return false;
  if (poll(fds, static_cast<nfds_t>(n), static_cast<int>(timeout.count())) <= 0) return true;
  for (int i = 0; i < n; ++i) {
    if (fds[i].revents == 0) continue;
    char buffer[4096];
    const ssize_t got = read(fds[i].fd, buffer, sizeof(buffer));
    std::string& sink = fds[i].fd == out_fd_ ? out_ : err_;
    if (got > 0) {
      sink.append(buffer, static_cast<std::size_t>(got));
    } else {
      int& fd = fds[i].fd == out_fd_ ? out_fd_ : err_fd_;
      close(fd);
      fd = -1;
    }
  }
  return true;
}

std::optional<std::string> Subprocess::read_line(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    const auto newline = out_.find('\n', out_consumed_);
    if (newline != std::string::npos) {
      std::string line = out_.substr(out_consumed_, newline - out_consumed_);
      out_consumed_ = newline + 1;
      return line;
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || out_fd_ < 0) return std::nullopt;
    pump(left);
  }
}

bool Subprocess::wait_for_stderr(const std::string& text, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (err_.find(text) == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 || err_fd_ < 0) return false;
    pump(left);
  }
  return true;
}

void Subprocess::signal(int number) {
  if (!exit_code_) kill(pid_, number);
}

std::optional<RunResult> Subprocess::wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!exit_code_) {
    int status = 0;
    const pid_t done = waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      exit_code_ = exit_code_of(status);
      break;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    pump(std::chrono::milliseconds(10));
  }
  while (pump(std::chrono::milliseconds(1000))) {
    if (Clock::now() >= deadline + std::chrono::seconds(5)) break;
  }
  RunResult result;
  result.exit_code = *exit_code_;
  result.out = out_.substr(out_consumed_);
  result.err = err_;
  return result;
}

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& env,
              const std::string& input, std::chrono::milliseconds timeout) {
  Subprocess child(argv, env, input);
  if (auto result = child.wait(timeout)) return *result;
  child.signal(SIGKILL);
  auto result = child.wait(std::chrono::seconds(10)).value_or(RunResult{});
  result.timed_out = true;
  return result;
}

RunResult launch_ranks(const std::string& collie_path, int ranks,
                       const std::vector<std::string>& program, const std::vector<std::string>& env,
                       std::chrono::milliseconds timeout) {
  std::vector<std::string> argv = {collie_path, "launch", "-n", std::to_string(ranks), "--"};
  argv.insert(argv.end(), program.begin(), program.end());
  return run(argv, env, {}, timeout);
}

}  // namespace collie::test
