// The processors this process may run on, and how many a job's ranks share
// on this host (host_cpus.hpp).
#include <collie/host_cpus.hpp>

#include <collie/environment.hpp>

#include <algorithm>
#include <cstdlib>
#include <sched.h>

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

}  // namespace collie
