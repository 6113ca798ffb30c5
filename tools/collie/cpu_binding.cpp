// Where launched ranks run: --bind's placement and binding (cpu_binding.hpp).
#include "cpu_binding.hpp"

#include <algorithm>
#include <sched.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>
#include <collie/host_cpus.hpp>

namespace collie::cli {

Binding parse_binding(const std::string& text) {
  if (text == "auto") return Binding::Auto;
  if (text == "none") return Binding::None;
  if (text == "packed") return Binding::Packed;
  throw Error(fmt::format("--bind must be auto, none or packed, not '{}'", text));
}

void add_bind_option(CLI::App& cmd, std::string& into, const std::string& ranks) {
  cmd.add_option("--bind", into,
                 "Where " + ranks +
                     " run: auto (packed when they outnumber the processors this process may "
                     "use; else one processor each, on processors no other collie launch of "
                     "this machine holds, or where the kernel puts them when too few are "
                     "free), none, or packed (one processor each, consecutive ranks on the "
                     "same one)")
      ->check(CLI::IsMember({"auto", "none", "packed"}))
      ->capture_default_str();
}

Placement place_ranks(Binding b, int ranks, const std::string& claims_dir) {
  Placement p;
  p.binding = b;
  p.cpu.assign(static_cast<std::size_t>(std::max(ranks, 0)), -1);
  const std::vector<int> cpus = allowed_cpus();
  const auto m = static_cast<long long>(cpus.size());
  if (m == 0 || b == Binding::None) return p;
  if (b == Binding::Auto && ranks <= m) {
    if (ranks < 2) return p;
    auto claims = std::make_shared<CpuClaims>(CpuClaims::take(
        cpus, ranks, claims_dir.empty() ? CpuClaims::default_dir() : claims_dir));
    if (claims->cpus().empty()) return p;
    p.cpu = claims->cpus();
    p.shared = ranks;
    p.claims = std::move(claims);
    return p;
  }
  for (int r = 0; r < ranks; ++r)
    p.cpu[static_cast<std::size_t>(r)] =
        cpus[static_cast<std::size_t>(static_cast<long long>(r) * m / ranks)];
  // r * m / ranks takes every index below m when ranks >= m, else ranks
  // different ones.
  p.shared = static_cast<int>(std::min<long long>(ranks, m));
  return p;
}

int Placement::cpu_of(int rank) const {
  return rank >= 0 && static_cast<std::size_t>(rank) < cpu.size()
             ? cpu[static_cast<std::size_t>(rank)]
             : -1;
}

void bind_to_cpu(int cpu) {
  if (cpu < 0 || cpu >= CPU_SETSIZE) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

std::string Placement::describe() const {
  if (shared == 0) return "";
  return fmt::format(", bound {} to processors {}", binding == Binding::Auto ? "auto" : "packed",
                     fmt::join(cpu, " "));
}

}  // namespace collie::cli
