// A torch program on two hosts (network namespaces, support/netns.hpp),
// started by torchrun's command line with `collie launch` in its place, and
// closed to strangers with no --insecure: the job's secret in the
// environment, torch's clients reaching the store through each node's relay
// on loopback. Skips, saying why, without namespaces or torch.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "support/catch.hpp"
#include <fmt/format.h>

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/netns.hpp"
#include "support/read_file.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"
#include "support/torch_client_py.hpp"
#include "support/torch_hosts.hpp"

using namespace std::chrono_literals;
using collie::test::kCollie;
using collie::test::NetworkNamespaces;
using collie::test::read_file;
using collie::test::Subprocess;

namespace {


// A torch program as the seeds write them: env://, the collie backend, an
// all_reduce checked against the sum it must give; then, once the test has
// tried its strangers (the file `go` exists), another.
constexpr const char* kMain = R"(import os, sys, time, torch
import torch.distributed as dist
dist.init_process_group("collie")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert t.eq(world * (world + 1) / 2).all(), t[:4]
print(f"rank {rank} of {world}: first all_reduce ok", flush=True)
go = sys.argv[1]
while not os.path.exists(go):
    time.sleep(0.05)
t = torch.full((1000,), float(rank))
dist.all_reduce(t)
assert t.eq(world * (world - 1) / 2).all(), t[:4]
print(f"rank {rank}: ok", flush=True)
dist.destroy_process_group()
)";

// torch's own TCPStore client, a stranger from `host`'s address: what it
// gets from the job's store.
constexpr const char* kStranger = R"(import datetime, sys, torch.distributed as dist
try:
    s = torch_client(sys.argv[1], int(sys.argv[2]), datetime.timedelta(seconds=5))
    s.set("stranger", "was here")
    print("served", s.get("stranger"))
except Exception as e:
    print("refused:", type(e).__name__)
)";

}  // namespace

TEST_CASE("two hosts: a torch program under torchrun's command line, closed to strangers",
          "[multihost][torchrun]") {
  NetworkNamespaces hosts(2);
  if (const auto missing = collie::test::torch_hosts_missing(hosts); !missing.empty()) {
    WARN("skipped: " << missing);
    return;
  }
  collie::test::ScratchDir dir;
  std::ofstream(dir.file("main.py")) << kMain;
  std::ofstream(dir.file("stranger.py")) << collie::test::kTorchClientPy << kStranger;
  const auto env = collie::test::job_secret(dir, "two-hosts-torch-secret-0123456789");
  const auto go = dir.file("go");
  // torchrun's line, `collie launch` in its place (node 0 picks its port
  // and writes it down, since tests never use a fixed one).
  auto node = [&](int i, const std::string& port) {
    std::vector<std::string> line{kCollie,
                                  "launch",
                                  "--nnodes=2",
                                  "--node_rank=" + std::to_string(i),
                                  "--nproc_per_node=2",
                                  "--master_addr=" + NetworkNamespaces::address(0),
                                  "--master_port=" + port};
    if (i == 0) line.insert(line.end(), {"--port-file", dir.file("port")});
    line.insert(line.end(), {dir.file("main.py"), go});
    return std::make_unique<Subprocess>(hosts.exec(i, line), env);
  };
  std::vector<std::unique_ptr<Subprocess>> nodes;
  nodes.push_back(node(0, "0"));
  const auto port = collie::test::port_written(dir.file("port"));
  REQUIRE(!port.empty());
  nodes.push_back(node(1, port));
  // Every rank's first all_reduce is done: the job is up.
  std::string seen[2];
  for (int i = 0; i < 2; ++i) {
    for (int k = 0; k < 2; ++k) {
      const auto line = nodes[static_cast<std::size_t>(i)]->read_line(180s);
      if (!line) {
        for (auto& n : nodes)
          n->signal(SIGTERM);
        const auto r = nodes[static_cast<std::size_t>(i)]->wait(30s);
        FAIL("node " << i << " said nothing more; its stderr:\n" << (r ? r->err : "?"));
      }
      INFO(*line);
      CHECK_THAT(*line, ContainsSubstring("of 4: first all_reduce ok"));
    }
  }
  // A stranger's torch client from host 1's address is refused by the
  // store; one on host 1's loopback is refused by the relay (if it found
  // it: the relay's port is not published, so it tries the store's).
  const auto stranger = collie::test::run(
      hosts.exec(1, {"/usr/bin/python3", dir.file("stranger.py"), NetworkNamespaces::address(0),
                     port}),
      {}, {}, 60s);
  INFO(stranger.out << stranger.err);
  CHECK_THAT(stranger.out, StartsWith("refused:"));
  std::ofstream(go) << "go\n";
  for (int i = 0; i < 2; ++i) {
    const auto r = nodes[static_cast<std::size_t>(i)]->wait(180s);
    REQUIRE(r);
    INFO("node " << i << " stdout:\n" << r->out << "\nstderr:\n" << r->err);
    CHECK(r->exit_code == 0);
    for (int local = 0; local < 2; ++local) {
      const int rank = i * 2 + local;
      CHECK_THAT(r->out, ContainsSubstring(fmt::format("[rank {}] rank {}: ok", rank, rank)));
    }
    CHECK_THAT(r->err, !ContainsSubstring("--insecure"));
    if (i == 0) CHECK_THAT(r->err, ContainsSubstring("refused a torch TCPStore client from another host"));
  }
}
