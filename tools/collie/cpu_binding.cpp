// Where launched ranks run: --bind's placement and binding (cpu_binding.hpp).
#include "cpu_binding.hpp"

#include <algorithm>

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
                     " run: auto (two or more: each on a slice of the processors this process "
                     "may use, of its own, or packed when they outnumber the processors), "
                     "none (where the kernel puts them), or packed (one processor each, "
                     "consecutive ranks on the same one)")
      ->check(CLI::IsMember({"auto", "none", "packed"}))
      ->capture_default_str();
}

Placement place_ranks(Binding b, int ranks, const std::vector<int>& cpus) {
  Placement p;
  p.binding = b;
  p.cpus.assign(static_cast<std::size_t>(std::max(ranks, 0)), {});
  const auto m = static_cast<long long>(cpus.size());
  if (m == 0 || b == Binding::None || (b == Binding::Auto && ranks < 2)) return p;
  const bool slices = b == Binding::Auto && ranks <= m;
  for (int r = 0; r < ranks; ++r) {
    const auto first = static_cast<long long>(r) * m / ranks;
    // Slices: up to the next rank's first (every index below m is taken,
    // each once); packed: that one processor (r * m / ranks takes every
    // index below m when ranks >= m, else ranks different ones).
    const auto end = slices ? (static_cast<long long>(r) + 1) * m / ranks : first + 1;
    p.cpus[static_cast<std::size_t>(r)].assign(cpus.begin() + first, cpus.begin() + end);
  }
  p.shared = static_cast<int>(std::min<long long>(ranks, m));
  if (slices) p.shared = static_cast<int>(m);
  return p;
}

Placement place_ranks(Binding b, int ranks) {
  return place_ranks(b, ranks, allowed_cpus());
}

bool Placement::set_of(int rank, cpu_set_t& set) const {
  CPU_ZERO(&set);
  if (rank < 0 || static_cast<std::size_t>(rank) >= cpus.size()) return false;
  bool any = false;
  for (int c : cpus[static_cast<std::size_t>(rank)])
    if (c >= 0 && c < CPU_SETSIZE) {
      CPU_SET(c, &set);
      any = true;
    }
  return any;
}

void bind_to(const cpu_set_t* set) {
  if (set != nullptr) sched_setaffinity(0, sizeof(*set), set);
}

std::string Placement::describe() const {
  if (shared == 0) return "";
  std::vector<std::string> each;
  for (const auto& c : cpus) {
    if (c.empty()) {
      each.emplace_back("-");
    } else if (c.size() == 1) {
      each.push_back(std::to_string(c.front()));
    } else if (c.back() - c.front() + 1 == static_cast<int>(c.size())) {
      each.push_back(fmt::format("{}-{}", c.front(), c.back()));
    } else {
      each.push_back(fmt::format("{}", fmt::join(c, ",")));
    }
  }
  return fmt::format(", bound {} to processors {}", binding == Binding::Auto ? "auto" : "packed",
                     fmt::join(each, " "));
}

}  // namespace collie::cli
