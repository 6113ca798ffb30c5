// The environment of a rank of `collie launch` (launch/rank_environment.hpp).
#include "rank_environment.hpp"

#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include <collie/environment.hpp>

namespace collie::cli {

namespace {

// PYTHONPATH with this build's collie_torch package first, where it is.
std::optional<std::string> python_path() {
  const std::filesystem::path dir = COLLIE_PYTHON_DIR;
  std::error_code ec;
  if (!std::filesystem::exists(dir / "collie_torch" / "__init__.py", ec)) return std::nullopt;
  const char* now = std::getenv("PYTHONPATH");
  return dir.string() + (now != nullptr && *now != '\0' ? ":" + std::string(now) : "");
}

}  // namespace

std::vector<std::string> rank_environment(const LaunchArgs& a, const RankPlace& p) {
  const int world = a.nproc_count * p.nodes;
  std::vector<std::string> env{
      fmt::format("MASTER_ADDR={}", p.store_host),
      fmt::format("MASTER_PORT={}", p.port),
      fmt::format("WORLD_SIZE={}", world),
      fmt::format("RANK={}", p.rank),
      fmt::format("LOCAL_RANK={}", p.local_rank),
      fmt::format("LOCAL_WORLD_SIZE={}", a.nproc_count),
      fmt::format("GROUP_RANK={}", p.node_rank),
      fmt::format("GROUP_WORLD_SIZE={}", p.nodes),
      // One role, as torchrun has unless told otherwise: its ranks are the job's.
      fmt::format("ROLE_NAME={}", a.role),
      fmt::format("ROLE_RANK={}", p.rank),
      fmt::format("ROLE_WORLD_SIZE={}", world),
      fmt::format("TORCHELASTIC_RUN_ID={}", a.rdzv_id),
      fmt::format("TORCHELASTIC_RESTART_COUNT={}", p.attempt),
      fmt::format("TORCHELASTIC_MAX_RESTARTS={}", a.max_restarts),
      fmt::format("TORCHELASTIC_ERROR_FILE={}", p.error_file),
      fmt::format("{}={}", environment::kRestartCount.name, p.attempt),
      fmt::format("{}=1", environment::kStoreHosted.name),
      // The job's secret, inherited: never on a command line.
      fmt::format("{}={}", environment::kStoreToken.name, p.token),
      fmt::format("{}=", environment::kStoreTokenFile.name),
      // They meet in the launcher's store, whatever the shell said.
      fmt::format("{}=", environment::kInitMethod.name),
  };
  if (a.omp_threads_one) env.emplace_back("OMP_NUM_THREADS=1");
  if (!p.socket_ifname.empty())
    env.push_back(fmt::format("{}={}", environment::kSocketIfname.name, p.socket_ifname));
  // Bound ranks: how many processors they share, unless the user said.
  if (p.shared_cpus > 0 && !environment::get(environment::kHostCpus))
    env.push_back(fmt::format("{}={}", environment::kHostCpus.name, p.shared_cpus));
  // torch's env:// meets in the launcher's store (its clients served there).
  env.emplace_back("TORCHELASTIC_USE_AGENT_STORE=True");
  if (const auto path = python_path()) env.push_back("PYTHONPATH=" + *path);
  return env;
}

}  // namespace collie::cli
