// The processors this process may run on, and how many a job's ranks share
// on this host (host_cpus.hpp).
#include <collie/host_cpus.hpp>

#include <collie/environment.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

namespace collie {

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

int host_cpus() {
  if (const auto text = environment::get(environment::kHostCpus)) {
    char* end = nullptr;
    const long n = std::strtol(text->c_str(), &end, 10);
    if (end != text->c_str() && *end == '\0' && n > 0 && n <= CPU_SETSIZE)
      return static_cast<int>(n);
  }
  return std::max(1, static_cast<int>(allowed_cpus().size()));
}

int online_cpus() {
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

int runnable_tasks() {
  const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[128];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return -1;
  text[n] = '\0';
  // "0.52 0.58 0.59 3/467 12345": the load averages, then running/total.
  const char* p = text;
  for (int field = 0; field < 3; ++field) {
    p = std::strchr(p, ' ');
    if (p == nullptr) return -1;
    ++p;
  }
  char* end = nullptr;
  const long running = std::strtol(p, &end, 10);
  if (end == p || *end != '/' || running < 1) return -1;
  return static_cast<int>(std::min<long>(running, 1 << 20));
}

bool machine_busy(int runnable, int job_ranks, int cpus) {
  if (runnable < 1) return false;
  const int others = runnable - 1 - std::max(job_ranks, 0);
  return others >= std::max(cpus, 1);
}

}  // namespace collie
