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
        std::vector<std::string>{"COLLIE_STORE_TOKEN=" + kToken, "COLLIE_LOG_LEVEL=warn"});
  };
  std::vector<std::unique_ptr<Subprocess>> nodes;
  nodes.push_back(node(0, "0"));
  REQUIRE(collie::test::eventually([&] { return !read_file(port_file).empty(); }, 60s));
  auto port = read_file(port_file);
  while (!port.empty() && (port.back() == '\n' || port.back() == ' ')) port.pop_back();
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
