#include <collie/host_cpus.hpp>

#include <algorithm>
#include <cstdlib>
#include <sched.h>

namespace collie {

int host_cpus() {
  if (const char* text = std::getenv("COLLIE_HOST_CPUS")) {
    char* end = nullptr;
    const long n = std::strtol(text, &end, 10);
    if (end != text && *end == '\0' && n > 0 && n <= CPU_SETSIZE) return static_cast<int>(n);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

}  // namespace collie
