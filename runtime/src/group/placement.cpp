// Where a job's ranks run, for Auto's cost model: this machine's id, its
// usable cores, its cache sizes (placement.hpp).
#include "group/placement.hpp"

#include <collie/host_cpus.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

namespace collie {

std::string machine_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  if (!id.empty()) return id;
  // No /proc: the host name (two machines never share one in a job).
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return std::string("host:") + host;
}

int usable_cores() {
  int cores = host_cpus();
  // cgroup v2: "max 100000" (no quota) or "<quota> <period>" in microseconds.
  std::ifstream in("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (in >> quota >> period && quota != "max" && period > 0) {
    try {
      const double q = std::stod(quota) / period;
      const int limit = std::max(1, static_cast<int>(std::ceil(q)));
      cores = cores > 0 ? std::min(cores, limit) : limit;
    } catch (const std::exception&) {
      // An unreadable quota: the affinity stands.
    }
  }
  return std::max(1, cores);
}

namespace {

// The kernel's view (what lscpu prints): sysconf's L3 can be the whole
// package's on a virtual machine (320 MiB on this project's, whose cores
// share 32).
CacheSizes read_cache_sizes() {
  CacheSizes c;
  for (int index = 0; index < 8; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index);
    std::ifstream level_in(dir + "/level"), type_in(dir + "/type"), size_in(dir + "/size");
    int level = 0;
    std::string type, size;
    if (!(level_in >> level) || !(type_in >> type) || !(size_in >> size)) break;
    if (type == "Instruction" || size.empty()) continue;
    double bytes = 0;
    try {
      bytes = std::stod(size);
    } catch (const std::exception&) {
      continue;
    }
    if (size.back() == 'K') bytes *= 1024;
    if (size.back() == 'M') bytes *= 1024 * 1024;
    if (level == 2) c.core = bytes;
    if (level == 3) c.host = bytes;
  }
  return c;
}

}  // namespace

CacheSizes cache_sizes() {
  static const CacheSizes sizes = read_cache_sizes();  // the machine's: read once
  return sizes;
}

double crowding(int host_ranks, int cores, int group_size) {
  const int here = std::max(1, std::min(host_ranks, group_size));
  return static_cast<double>(here) / static_cast<double>(std::max(1, cores));
}

}  // namespace collie
