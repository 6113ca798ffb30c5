#include "bench_job.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/server.hpp>

namespace collie::cli {

namespace {

void set_rank_environment(int rank, int ranks, std::uint16_t port) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", std::to_string(ranks).c_str(), 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(ranks).c_str(), 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  setenv("COLLIE_STORE_HOSTED", "1", 1);
}

}  // namespace

bool inside_a_job() {
  for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

int run_standalone(int ranks, const std::function<int()>& rank_main) {
  if (ranks < 1) throw Error(fmt::format("the number of ranks must be at least 1, not {}", ranks));
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) throw Error("pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> children;
  for (int rank = 1; rank < ranks; ++rank) {
    const pid_t child = fork();
    if (child < 0) {
      const int e = errno;
      for (pid_t c : children) ::kill(c, SIGKILL);
      throw Error(fmt::format("fork failed: {}", std::strerror(e)));
    }
    if (child == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(pipe_fds[1]);
      std::uint16_t port = 0;
      if (::read(pipe_fds[0], &port, sizeof(port)) != sizeof(port)) _exit(1);
      set_rank_environment(rank, ranks, port);
      const int rc = rank_main();
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    children.push_back(child);
  }
  ::close(pipe_fds[0]);
  int rc = 1;
  {
    store::ServerOptions options;
    options.host = "127.0.0.1";
    store::StoreServer server(options);
    const std::uint16_t port = server.port();
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (::write(pipe_fds[1], &port, sizeof(port)) != sizeof(port)) throw Error("pipe write failed");
    }
    ::close(pipe_fds[1]);
    set_rank_environment(0, ranks, port);
    rc = rank_main();
    // The others may be waiting for rank 0 in the store, which is still up:
    // do not let them wait out the job's timeout.
    if (rc != 0)
      for (pid_t c : children) ::kill(c, SIGTERM);
    for (pid_t c : children) {
      int status = 0;
      while (waitpid(c, &status, 0) < 0 && errno == EINTR) {
      }
      if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) rc = 1;
    }
  }
  return rc;
}

}  // namespace collie::cli
