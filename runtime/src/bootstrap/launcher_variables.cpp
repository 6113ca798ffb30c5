// The launchers' variables: rank, world size, and the store's address
// under srun and mpirun (launcher_variables.hpp).
#include "bootstrap/launcher_variables.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/fnv.hpp>

namespace collie {

std::string first_host_of_nodelist(std::string_view nodelist) {
  // The first top-level entry: commas inside brackets do not separate hosts.
  int depth = 0;
  std::size_t end = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (depth < 0) break;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const auto entry = nodelist.substr(0, end);
  if (entry.empty() || depth != 0) {
    throw Error(fmt::format("collie::init: cannot read SLURM_JOB_NODELIST='{}'", nodelist));
  }
  // Every bracket becomes the first value of its first range ("07-09" -> "07").
  std::string host;
  for (std::size_t i = 0; i < entry.size(); ++i) {
    if (entry[i] != '[') {
      host.push_back(entry[i]);
      continue;
    }
    const auto close = entry.find(']', i);
    const auto inside = entry.substr(i + 1, close - i - 1);
    const auto first = inside.substr(0, inside.find_first_of(",-"));
    if (first.empty() || first.find_first_not_of("0123456789") != std::string_view::npos) {
      throw Error(fmt::format("collie::init: cannot read SLURM_JOB_NODELIST='{}'", nodelist));
    }
    host += first;
    i = close;
  }
  return host;
}

namespace detail {

namespace {

constexpr LauncherFamily kFamilies[] = {
    {"torchrun / collie launch", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
};

std::uint16_t parse_port(const std::string& text, const std::string& what) {
  const int port = parse_int(text, what);
  if (port < 1 || port > 65535) {
    throw Error(fmt::format("collie::init: {}={} is not a port number (1-65535)", what, port));
  }
  return static_cast<std::uint16_t>(port);
}

// COLLIE_PORT_RANGE: "LOW-HIGH".
std::pair<int, int> port_range(const EnvironmentLookup& lookup) {
  const auto& v = environment::kPortRange;
  const std::string text = lookup(v.name).value_or(std::string(v.fallback));
  // A whole number, all of `part`; -1 if it is not one.
  const auto number = [](std::string_view part) {
    int value = -1;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    return ec == std::errc() && end == part.data() + part.size() ? value : -1;
  };
  const std::string_view range = text;
  const auto dash = range.find('-');
  const int low = dash == std::string_view::npos ? -1 : number(range.substr(0, dash));
  const int high = dash == std::string_view::npos ? -1 : number(range.substr(dash + 1));
  if (low < 1 || high > 65535 || low > high) environment::refuse(v, text, "collie::init");
  return {low, high};
}

// A port in [low, high] from a job's id: FNV-1a of the text, so every rank
// of the job computes the same one.
int derived_port(const std::string& id, int low, int high) {
  return low + static_cast<int>(fnv1a64(id) % static_cast<std::uint64_t>(high - low + 1));
}

// Under srun or mpirun: the job's id, which every rank shares.
std::optional<std::string> scheduler_job_id(const EnvironmentLookup& lookup,
                                            std::string_view scheduler) {
  if (scheduler == "Slurm") {
    if (auto job = lookup("SLURM_JOB_ID").value_or(lookup("SLURM_JOBID").value_or(""));
        !job.empty())
      return "slurm " + job + " " + lookup("SLURM_STEP_ID").value_or("0");
  } else if (scheduler == "Open MPI") {
    if (auto job = lookup("OMPI_MCA_ess_base_jobid")
                       .value_or(lookup("PMIX_NAMESPACE").value_or(lookup("PMIX_ID").value_or("")));
        !job.empty())
      return "ompi " + job;
  }
  return std::nullopt;
}

// Under srun or mpirun: rank 0's node (loopback when every rank is on one
// node).
std::optional<std::string> scheduler_master(const EnvironmentLookup& lookup,
                                            std::string_view scheduler, int world_size) {
  if (scheduler == "Slurm") {
    const auto nodes =
        lookup("SLURM_STEP_NUM_NODES")
            .value_or(lookup("SLURM_NNODES").value_or(lookup("SLURM_JOB_NUM_NODES").value_or("")));
    const auto nodelist =
        lookup("SLURM_STEP_NODELIST").value_or(lookup("SLURM_JOB_NODELIST").value_or(""));
    if (nodes == "1") return "127.0.0.1";
    if (!nodelist.empty()) return first_host_of_nodelist(nodelist);
  } else if (scheduler == "Open MPI") {
    const auto local = lookup("OMPI_COMM_WORLD_LOCAL_SIZE");
    if (local && *local == std::to_string(world_size)) return "127.0.0.1";
  }
  return std::nullopt;
}

}  // namespace

int parse_int(const std::string& text, const std::string& what) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw Error(fmt::format("collie::init: {}='{}' is not an integer", what, text));
  }
  return value;
}

const LauncherFamily* launcher_family(const EnvironmentLookup& lookup) {
  for (const auto& f : kFamilies)
    if (lookup(f.rank)) return &f;
  return nullptr;
}

void resolve_rank(const InitOptions& options, const EnvironmentLookup& lookup,
                  const LauncherFamily* family, JobConfig& config) {
  // Explicit options win, then the family's variables, which must also set
  // the world size.
  if (family != nullptr) {
    const auto world = lookup(family->world_size);
    if (!world && !options.world_size) {
      throw Error(fmt::format("collie::init: {} is set but {} is not; set both ({})", family->rank,
                              family->world_size, family->name));
    }
    config.rank = parse_int(*lookup(family->rank), family->rank);
    if (world) config.world_size = parse_int(*world, family->world_size);
    if (auto local = lookup(family->local_rank))
      config.local_rank = parse_int(*local, family->local_rank);
    config.rank_source = fmt::format("{} ({}, {})", family->name, family->rank, family->world_size);
  }
  if (options.rank) {
    config.rank = *options.rank;
    config.rank_source = "the options";
  }
  if (options.world_size) config.world_size = *options.world_size;
  if (config.join && family == nullptr && !options.rank) {
    // A newcomer learns its rank and the world's size when it is admitted.
    config.rank = 0;
    config.world_size = std::max(config.world_size, 1);
    config.rank_source = "its admission (a newcomer: COLLIE_JOIN)";
    return;
  }
  if (family == nullptr && !options.rank) {
    throw Error(
        "collie::init: this process does not know its rank: set RANK and WORLD_SIZE (as "
        "torchrun and collie launch do), run it under srun (SLURM_PROCID) or mpirun "
        "(OMPI_COMM_WORLD_RANK), or pass rank and world_size in the options");
  }
  if (family == nullptr && !options.world_size) {
    throw Error("collie::init: the rank is given but not the world size; pass world_size too");
  }
  if (config.world_size < 1) {
    throw Error(fmt::format("collie::init: the world size is {}; it must be at least 1",
                            config.world_size));
  }
  if (config.rank < 0 || config.rank >= config.world_size) {
    throw Error(fmt::format("collie::init: rank {} is not in [0, {}) (from {})", config.rank,
                            config.world_size, config.rank_source));
  }
  if (config.local_rank < 0) {
    throw Error(fmt::format("collie::init: the local rank is {}; it must not be negative",
                            config.local_rank));
  }
}

void resolve_store_address(const EnvironmentLookup& lookup, const LauncherFamily* family,
                           JobConfig& config) {
  auto addr = lookup("MASTER_ADDR");
  auto port = lookup("MASTER_PORT");
  const std::string_view scheduler = family != nullptr ? family->name : "";
  if (!addr) addr = scheduler_master(lookup, scheduler, config.world_size);
  if (!port) {
    if (const auto id = scheduler_job_id(lookup, scheduler)) {
      const auto [low, high] = port_range(lookup);
      config.port_source = fmt::format(
          "derived from the {} job's id ({}) in COLLIE_PORT_RANGE {}-{}; set MASTER_PORT to "
          "choose another",
          scheduler, id->substr(id->find(' ') + 1), low, high);
      port = std::to_string(derived_port(*id, low, high));
    }
  }
  if (!addr || !port) {
    const bool multi_node_mpi = !addr && scheduler == "Open MPI";
    throw Error(fmt::format(
        "collie::init: env:// needs the store's address: set {}{}{} (torchrun and collie launch "
        "set both), or use tcp://HOST:PORT{}",
        addr ? "" : "MASTER_ADDR", !addr && !port ? " and " : "", port ? "" : "MASTER_PORT",
        multi_node_mpi ? "; mpirun across nodes: pass rank 0's node, e.g. mpirun -x "
                         "MASTER_ADDR=node01"
                       : ""));
  }
  config.master_addr = *addr;
  config.master_port = parse_port(*port, "MASTER_PORT");
}

}  // namespace detail
}  // namespace collie
