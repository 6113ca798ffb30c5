// Jobs across real network boundaries: three hosts made of network
// namespaces on a bridge (support/netns.hpp), 10.77.0.1 to .3. A test skips,
// saying why, where namespaces cannot be made (not root, no iproute2).
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include <catch2/catch.hpp>

#include "support/eventually.hpp"
#include "support/netns.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::NetworkNamespaces;
using collie::test::Subprocess;

namespace {

const std::string kCollie = COLLIE_CLI_PATH;
const std::string kWorker = COLLIE_COLLECTIVE_WORKER_PATH;
const std::string kToken = "multi-host-test-secret-0123456789abcdef";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_CASE("three hosts: collie launch --nnodes 3 runs a checked all_reduce", "[multihost]") {
  NetworkNamespaces hosts(3);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  collie::test::ScratchDir dir;
  const auto port_file = dir.file("port");
  auto node = [&](int i, const std::string& port) {
    std::vector<std::string> command{kCollie,
                                     "launch",
                                     "--nnodes",
                                     "3",
                                     "--node-rank",
                                     std::to_string(i),
                                     "-n",
                                     "2",
                                     "--master-addr",
                                     hosts.address(0),
                                     "--master-port",
                                     port};
    if (i == 0) command.insert(command.end(), {"--port-file", port_file});
    command.insert(command.end(), {"--", kWorker, "stall", "0"});
    return std::make_unique<Subprocess>(
        hosts.exec(i, command),
        // Each host's interface by its name's prefix (cv...), as NCCL's
        // NCCL_SOCKET_IFNAME is given.
        std::vector<std::string>{"COLLIE_STORE_TOKEN=" + kToken, "COLLIE_LOG_LEVEL=warn",
                                 "COLLIE_SOCKET_IFNAME=cv"});
  };
  std::vector<std::unique_ptr<Subprocess>> nodes;
  nodes.push_back(node(0, "0"));
  REQUIRE(collie::test::eventually([&] { return !read_file(port_file).empty(); }, 60s));
  auto port = read_file(port_file);
  while (!port.empty() && (port.back() == '\n' || port.back() == ' '))
    port.pop_back();
  nodes.push_back(node(1, port));
  nodes.push_back(node(2, port));
  std::string out;
  for (int i = 0; i < 3; ++i) {
    const auto r = nodes[static_cast<std::size_t>(i)]->wait(120s);
    REQUIRE(r);
    INFO("node " << i << " stdout:\n" << r->out << "\nstderr:\n" << r->err);
    CHECK(r->exit_code == 0);
    out += r->out;
    // Every rank reached the others on the hosts' addresses.
    for (int local = 0; local < 2; ++local) {
      const int rank = i * 2 + local;
      CHECK_THAT(r->out, Catch::Contains("[rank " + std::to_string(rank) + "] rank " +
                                         std::to_string(rank) + ": ok"));
    }
  }
}

TEST_CASE("three hosts: a host whose link goes silent is named by every other rank within 10 s",
          "[multihost]") {
  NetworkNamespaces hosts(3);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  // One rank per host, started by hand (no launcher would stop the others
  // first): rank 0 hosts the store on 10.77.0.1. The port is the host
  // namespace's own: nothing else can hold it.
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int i = 0; i < 3; ++i) {
    ranks.push_back(std::make_unique<Subprocess>(
        hosts.exec(i, {kWorker, "loop"}),
        std::vector<std::string>{"MASTER_ADDR=" + hosts.address(0), "MASTER_PORT=29500",
                                 "WORLD_SIZE=3", "RANK=" + std::to_string(i),
                                 "COLLIE_STORE_TOKEN=" + kToken, "COLLIE_LOG_LEVEL=off"}));
  }
  for (int i = 0; i < 3; ++i)
    REQUIRE(ranks[static_cast<std::size_t>(i)]->read_line(120s) ==
            "rank " + std::to_string(i) + ": looping");
  REQUIRE(hosts.cut(2));
  const auto cut = std::chrono::steady_clock::now();
  for (int i : {0, 1}) {
    const auto line = ranks[static_cast<std::size_t>(i)]->read_line(60s);
    const auto after = std::chrono::steady_clock::now() - cut;
    REQUIRE(line);
    INFO(*line);
    CHECK_THAT(*line, Catch::StartsWith("rank " + std::to_string(i) + ": failed after "));
    CHECK_THAT(*line, Catch::Contains("rank 2 at 10.77.0.3:"));
    CHECK_THAT(*line, Catch::Contains("cannot be reached") || Catch::Contains("as rank"));
    CHECK(after < 10s);
  }
}

TEST_CASE("three hosts: loopback advertised to a remote master, and a host that never joins",
          "[multihost]") {
  NetworkNamespaces hosts(3);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  auto rank_on = [&](int host, int rank, std::vector<std::string> extra,
                     const std::string& timeout = "4") {
    std::vector<std::string> env{"MASTER_ADDR=" + hosts.address(0),
                                 "MASTER_PORT=29500",
                                 "WORLD_SIZE=3",
                                 "RANK=" + std::to_string(rank),
                                 "COLLIE_STORE_TOKEN=" + kToken,
                                 "COLLIE_LOG_LEVEL=off",
                                 "COLLIE_TIMEOUT=" + timeout};
    env.insert(env.end(), extra.begin(), extra.end());
    return std::make_unique<Subprocess>(hosts.exec(host, {kWorker, "stall", "0"}), env);
  };
  {
    // Host 1 would advertise 127.0.0.1 to a job whose master is 10.77.0.1:
    // refused at once, naming the interface and the master.
    auto r = rank_on(1, 1, {"COLLIE_SOCKET_IFNAME=lo"})->wait(60s);
    REQUIRE(r);
    INFO(r->err);
    CHECK(r->exit_code == 1);
    CHECK_THAT(r->err, Catch::Contains("COLLIE_SOCKET_IFNAME='lo' makes this rank advertise "
                                       "127.0.0.1 on 'lo'") &&
                           Catch::Contains("the job's master 10.77.0.1 is on another host"));
  }
  // Ranks 0 and 1 come (rank 0 hosts the store, and waits longest, so that
  // rank 1 reads the store before it goes); host 2's rank never does. The
  // port is the namespace's own: nothing else can hold it.
  auto r0 = rank_on(0, 0, {}, "6");
  auto r1 = rank_on(1, 1, {}, "3");
  for (auto* p : {r0.get(), r1.get()}) {
    const auto r = p->wait(60s);
    REQUIRE(r);
    INFO(r->err);
    CHECK(r->exit_code == 1);
    CHECK_THAT(r->err, Catch::Contains("for all 3 ranks to join, and rank 2 never joined (joined: "
                                       "rank 0 at 10.77.0.1:") &&
                           Catch::Contains("rank 1 at 10.77.0.2:"));
  }
}
