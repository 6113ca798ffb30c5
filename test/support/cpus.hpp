// The processors this test process may run on (its affinity), ascending:
// what `collie launch --bind` and `collie bench --bind` place ranks on.
#pragma once

#include <sched.h>
#include <vector>

namespace collie::test {

inline std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace collie::test
