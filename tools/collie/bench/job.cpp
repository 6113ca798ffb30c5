// A benchmark's ranks: the job's, or its own on this machine
// (bench/job.hpp).
#include "job.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <optional>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/host_cpus.hpp>
#include <collie/store/client_options.hpp>
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
  setenv(std::string(environment::kStoreHosted.name).c_str(), "1", 1);
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

int run_standalone(int ranks, const Placement& placement, const std::function<int()>& rank_main) {
  if (ranks < 1) throw Error(fmt::format("the number of ranks must be at least 1, not {}", ranks));
  // Bound ranks: how many processors they share, unless the user said
  // (inherited by every rank; cpu_binding.hpp).
  if (placement.shared > 0)
    setenv(std::string(environment::kHostCpus.name).c_str(),
           std::to_string(placement.shared).c_str(), 0);
  // The job's secret, as `collie launch` makes one: the ranks inherit it
  // (never on a command line), and the store and their handshakes check it.
  std::string token = store::token_from_environment();
  if (token.empty()) token = store::random_token();
  setenv(std::string(environment::kStoreToken.name).c_str(), token.c_str(), 1);
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
      cpu_set_t cpus;
      if (placement.set_of(rank, cpus)) bind_to(&cpus);
      const int rc = rank_main();
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(rc);
    }
    children.push_back(child);
  }
  ::close(pipe_fds[0]);
  // Rank 0 is this process: bound before its threads start (the watcher,
  // the store's), which then share its processor.
  if (cpu_set_t cpus; placement.set_of(0, cpus)) bind_to(&cpus);

  // Watches the other ranks: one that fails while rank 0 still runs may
  // leave rank 0 waiting for it (in the rendezvous, say) until the job's
  // timeout. Rank 0 usually notices on its own within a second (a closed
  // connection); if it has not after kGrace, the watcher stops the job.
  constexpr auto kGrace = std::chrono::seconds(3);
  std::atomic<bool> rank0_done{false};
  std::vector<int> statuses(children.size(), 0);
  std::thread watcher([&] {
    std::vector<bool> reaped(children.size(), false);
    std::size_t left = children.size();
    std::optional<std::chrono::steady_clock::time_point> failed_at;
    std::string failure;
    while (left > 0) {
      for (std::size_t i = 0; i < children.size(); ++i) {
        if (reaped[i] || waitpid(children[i], &statuses[i], WNOHANG) != children[i]) continue;
        reaped[i] = true;
        --left;
        const int st = statuses[i];
        if (!failed_at && !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !rank0_done) {
          failed_at = std::chrono::steady_clock::now();
          failure = WIFEXITED(st) ? fmt::format("exited with status {}", WEXITSTATUS(st))
                                  : fmt::format("was killed by signal {} ({})", WTERMSIG(st),
                                                strsignal(WTERMSIG(st)));
          failure = fmt::format("rank {} (pid {}) {}", i + 1, children[i], failure);
        }
      }
      if (failed_at && !rank0_done && std::chrono::steady_clock::now() - *failed_at > kGrace) {
        std::fprintf(stderr, "collie bench: %s; stopping the job\n", failure.c_str());
        for (pid_t c : children) ::kill(c, SIGTERM);
        std::fflush(stdout);
        std::fflush(stderr);
        _exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });

  int rc = 1;
  try {
    store::ServerOptions options;
    options.host = "127.0.0.1";
    options.token = token;
    options.seal = store::seal_from_environment();
    options.certificates = store::certificates_from_environment();
    store::StoreServer server(options);
    const std::uint16_t port = server.port();
    for (std::size_t i = 0; i < children.size(); ++i) {
      if (::write(pipe_fds[1], &port, sizeof(port)) != sizeof(port)) throw Error("pipe write failed");
    }
    ::close(pipe_fds[1]);
    set_rank_environment(0, ranks, port);
    rc = rank_main();
  } catch (...) {
    rank0_done = true;
    for (pid_t c : children) ::kill(c, SIGKILL);
    watcher.join();
    throw;
  }
  rank0_done = true;
  // The others may be waiting for rank 0 in the store, which is gone now:
  // do not let them wait out the job's timeout.
  if (rc != 0)
    for (pid_t c : children) ::kill(c, SIGTERM);
  watcher.join();
  for (int st : statuses)
    if (rc == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0)) rc = 1;
  return rc;
}

}  // namespace collie::cli
