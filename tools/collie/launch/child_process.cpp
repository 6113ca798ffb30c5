// A rank `collie launch` starts: its process, pipes and wait status
// (launch/child_process.hpp).
#include "child_process.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "cpu_binding.hpp"
#include "exec_args.hpp"

namespace collie::cli {

namespace {

void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(fmt::format("collie launch: cannot create a pipe: {}", std::strerror(errno)));
  }
}

std::string signal_name(int number) {
  const char* abbrev = sigabbrev_np(number);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", number);
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, const cpu_set_t* cpus) {
  if (argv.empty()) throw Error("collie launch: no program to run");
  ExecArgs exec(argv, env);
  auto& args = exec.argv;
  auto& envp = exec.envp;

  int out[2], err[2], exec_error[2];
  make_pipe(out);
  make_pipe(err);
  make_pipe(exec_error);
  const int dev_null = open("/dev/null", O_RDONLY | O_CLOEXEC);

  // Copied before the fork: the child only reads it.
  cpu_set_t bind_set;
  CPU_ZERO(&bind_set);
  if (cpus != nullptr) bind_set = *cpus;
  const pid_t launcher = getpid();
  pid_ = fork();
  if (pid_ < 0) {
    const int saved = errno;
    for (int fd : {out[0], out[1], err[0], err[1], exec_error[0], exec_error[1], dev_null})
      close(fd);
    throw Error(fmt::format("collie launch: cannot fork: {}", std::strerror(saved)));
  }
  if (pid_ == 0) {
    // Only async-signal-safe calls from here to exec.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    // Its own process group: a terminal's Ctrl-C reaches only the launcher,
    // which forwards it once, to the child and everything the child started.
    setpgid(0, 0);
    // The child dies with its launcher, even one killed by SIGKILL: no rank
    // lives on as an orphan. (The launcher forks from its main thread, which
    // lives as long as it does.) It may have died before this line.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(128 + SIGKILL);
    bind_to(cpus != nullptr ? &bind_set : nullptr);
    if (dev_null >= 0) dup2(dev_null, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvpe(args[0], args.data(), envp.data());
    const int code = errno;
    (void)!write(exec_error[1], &code, sizeof(code));
    _exit(127);
  }
  for (int fd : {out[1], err[1], exec_error[1], dev_null})
    close(fd);
  out_fd_ = out[0];
  err_fd_ = err[0];
  fcntl(out_fd_, F_SETFL, O_NONBLOCK);
  fcntl(err_fd_, F_SETFL, O_NONBLOCK);

  // The exec-error pipe closes on a successful exec; otherwise it carries errno.
  int code = 0;
  ssize_t got;
  do {
    got = read(exec_error[0], &code, sizeof(code));
  } while (got < 0 && errno == EINTR);
  close(exec_error[0]);
  if (got == sizeof(code)) {
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    throw Error(fmt::format("collie launch: cannot run '{}': {}", argv[0], std::strerror(code)));
  }
}

ChildProcess::~ChildProcess() {
  close_out();
  close_err();
}

void ChildProcess::close_out() {
  if (out_fd_ >= 0) close(out_fd_);
  out_fd_ = -1;
}

void ChildProcess::close_err() {
  if (err_fd_ >= 0) close(err_fd_);
  err_fd_ = -1;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("killed by {}{}", signal_name(WTERMSIG(status)),
                       WCOREDUMP(status) ? " (core dumped)" : "");
  }
  return fmt::format("wait status {}", status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

}  // namespace collie::cli
