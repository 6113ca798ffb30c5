#include "cpu_binding.hpp"

#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::cli {

Binding parse_binding(const std::string& text) {
  if (text == "auto") return Binding::Auto;
  if (text == "none") return Binding::None;
  if (text == "packed") return Binding::Packed;
  throw Error(fmt::format("--bind must be auto, none or packed, not '{}'", text));
}

const char* binding_name(Binding b) {
  switch (b) {
    case Binding::Auto:
      return "auto";
    case Binding::None:
      return "none";
    case Binding::Packed:
      return "packed";
  }
  return "?";
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

int cpu_for(Binding b, int local, int ranks, const std::vector<int>& cpus) {
  if (cpus.empty() || ranks < 1 || local < 0 || local >= ranks) return -1;
  const auto m = static_cast<long long>(cpus.size());
  if (b == Binding::None || (b == Binding::Auto && ranks <= m)) return -1;
  return cpus[static_cast<std::size_t>(static_cast<long long>(local) * m / ranks)];
}

std::string host_cpus_variable(Binding b, int ranks, const std::vector<int>& cpus) {
  if (std::getenv("COLLIE_HOST_CPUS") != nullptr) return "";
  std::set<int> used;
  for (int r = 0; r < ranks; ++r)
    if (const int cpu = cpu_for(b, r, ranks, cpus); cpu >= 0) used.insert(cpu);
  if (used.empty()) return "";
  return fmt::format("COLLIE_HOST_CPUS={}", used.size());
}

cpu_set_t cpu_mask(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  return set;
}

}  // namespace collie::cli
