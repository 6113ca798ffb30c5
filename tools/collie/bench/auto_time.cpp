// collie_auto_time: what Auto's first choice costs at scale, on one core.
// For every collective with more than one algorithm and buffers of 8 B to
// 16 MiB (float32, a power of 8 apart), the time auto_algorithm() takes to
// pick for a group of HOSTS x RANKS_PER_HOST ranks (by host), with the TCP
// cost model (or shared memory's with --shm; --crowding: ranks per core).
// The runtime makes this choice once per group and size bucket, on every
// rank (runtime/src/collective.cpp).
//
//   collie_auto_time 512 8            # 4,096 ranks on 512 hosts
//   collie_auto_time 1 256 --shm --crowding 128
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <collie/collectives/cost.hpp>
#include <collie/collectives/hosts.hpp>

namespace cs = collie::collectives;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: collie_auto_time HOSTS RANKS_PER_HOST [--shm] [--crowding X]\n");
    return 2;
  }
  const int hosts = std::atoi(argv[1]), per_host = std::atoi(argv[2]);
  bool shm = false;
  double crowding = 1;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--shm") == 0) shm = true;
    if (std::strcmp(argv[i], "--crowding") == 0 && i + 1 < argc) crowding = std::atof(argv[++i]);
  }
  if (hosts < 1 || per_host < 1 || crowding <= 0) {
    std::fprintf(stderr, "collie_auto_time: HOSTS and RANKS_PER_HOST at least 1\n");
    return 2;
  }
  const int world = hosts * per_host;
  const auto layout =
      hosts > 1 ? std::make_shared<const cs::Hosts>(cs::uniform_hosts(hosts, per_host, false))
                : nullptr;
  cs::CostModel model = shm ? cs::shared_memory_cost_model(crowding) : cs::CostModel{};
  model.crowding = crowding;
  std::printf("# %d ranks (%d hosts x %d), %s model, crowding %g\n", world, hosts, per_host,
              shm ? "shared-memory" : "TCP", crowding);
  std::printf("%-16s %10s  %-20s %10s\n", "collective", "bytes", "auto picks", "ms");
  double worst = 0;
  for (auto c : cs::kCollectives) {
    if (cs::algorithms_for(c).size() < 2) continue;
    for (std::size_t bytes = 8; bytes <= (std::size_t{16} << 20); bytes *= 8) {
      const std::size_t count = std::max<std::size_t>(1, bytes / 4);
      const auto start = std::chrono::steady_clock::now();
      const auto pick = cs::auto_algorithm(c, world, count, 4, std::size_t{1} << 18, model, layout);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      worst = std::max(worst, ms);
      std::printf("%-16s %10zu  %-20s %10.1f\n", std::string(cs::collective_name(c)).c_str(), bytes,
                  std::string(cs::algorithm_name(pick)).c_str(), ms);
    }
  }
  std::printf("# the slowest first choice: %.1f ms\n", worst);
}
