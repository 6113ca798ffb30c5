// An elastic job (--nnodes 2:3) on three hosts (network namespaces,
// support/netns.hpp): one node's launcher is killed mid-run and the job
// goes on with two; started again, the next round has three. The torch
// program checkpoints each step and resumes from it, as seed 001 advises,
// and ends with every step counted once. And a job whose c10d endpoint is a
// store of its own loses round 0's node 0 (support/lost_node_job.hpp).
// Skips, saying why, without namespaces or torch.
#include <csignal>
#include <fstream>
#include <memory>

#include "support/catch.hpp"
#include <fmt/format.h>

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/lost_node_job.hpp"
#include "support/netns.hpp"
#include "support/read_file.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"
#include "support/torch_hosts.hpp"

using namespace std::chrono_literals;
using collie::test::kCollie;
using collie::test::NetworkNamespaces;
using collie::test::read_file;
using collie::test::Subprocess;

namespace {

// Resumes from the checkpoint (support/lost_node_job.hpp's program); ends
// once it has run on 3 nodes, then 2, then 3 again, and n steps after that.
const std::string kTrain = collie::test::kCheckpointResume + R"(def back_again(w):  # a world of 3, then 2, then 3
    return any(w[i] == 3 and 2 in w[i + 1:j] and w[j] == 3
               for i in range(len(w)) for j in range(i + 2, len(w)))

here = 0
while not (back_again(state["worlds"]) and here >= n):
    step_once(0.05)
    here += 1
)" + collie::test::kCheckpointEnd;

}  // namespace

TEST_CASE("elastic nodes: --nnodes 2:3 goes on without a lost node and takes it back",
          "[multihost][elastic]") {
  NetworkNamespaces hosts(3);
  if (const auto missing = collie::test::torch_hosts_missing(hosts); !missing.empty()) {
    WARN("skipped: " << missing);
    return;
  }
  collie::test::ScratchDir dir;
  std::ofstream(dir.file("train.py")) << kTrain;
  const auto env = collie::test::job_secret(dir, "elastic-job-secret-0123456789abcdef");
  const auto ckpt = dir.file("ckpt.json");
  // torchrun's elastic line; the store's node picks its port and writes it
  // down (tests never use a fixed one).
  auto node = [&](int i, const std::string& port) {
    std::vector<std::string> line{kCollie,
                                  "launch",
                                  "--nnodes=2:3",
                                  "--nproc_per_node=1",
                                  "--max_restarts=3",
                                  "--rdzv_backend=c10d",
                                  "--rdzv_endpoint=" + NetworkNamespaces::address(0) + ":" + port,
                                  "--rdzv_conf=last_call_timeout=2,join_timeout=20"};
    if (i == 0) line.insert(line.end(), {"--port-file", dir.file("port")});
    line.insert(line.end(), {dir.file("train.py"), ckpt, "10"});
    return std::make_unique<Subprocess>(hosts.exec(i, line), env);
  };
  std::vector<std::unique_ptr<Subprocess>> nodes;
  auto stop_all = [&] {
    for (auto& n : nodes)
      if (n) n->signal(SIGTERM);
  };
  // Every line a node's ranks print, until one says `words`.
  auto until = [&](std::size_t i, const std::string& words) {
    while (true) {
      const auto line = nodes[i]->read_line(180s);
      if (!line) {
        stop_all();
        const auto r = nodes[i]->wait(30s);
        FAIL("node " << i << " never said '" << words << "'; its stderr:\n" << (r ? r->err : "?"));
      }
      if (line->find(words) != std::string::npos) return;
    }
  };
  nodes.push_back(node(0, "0"));
  const auto port = collie::test::port_written(dir.file("port"));
  REQUIRE(!port.empty());
  nodes.push_back(node(1, port));
  nodes.push_back(node(2, port));
  // All three in a round, and a few steps done.
  until(0, "of 3: from step");
  REQUIRE(collie::test::eventually([&] { return !read_file(ckpt).empty(); }, 120s));
  // Node 2's launcher dies (its rank with it): the others go on as two.
  nodes[2]->signal(SIGKILL);
  nodes[2]->wait(30s);
  until(0, "of 2: from step");
  // Node 2 comes back: the next round has three again.
  nodes[2] = node(2, port);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto r = nodes[i]->wait(300s);
    if (!r) stop_all();
    REQUIRE(r);
    INFO("node " << i << " stdout:\n" << r->out << "\nstderr:\n" << r->err);
    CHECK(r->exit_code == 0);
    if (i == 0) {
      CHECK_THAT(r->err, ContainsSubstring("not in this round:"));
      CHECK_THAT(r->err, ContainsSubstring("is waiting to join"));
    }
  }
  // Every step summed once, across the three rounds and the resumes.
  const auto state = read_file(ckpt);
  INFO(state);
  CHECK_THAT(state, ContainsSubstring("\"worlds\": [3, 2, 3]"));
  const long long steps = std::stoll(state.substr(state.find("\"step\": ") + 8));
  const long long sum = std::stoll(state.substr(state.find("\"sum\": ") + 7));
  CHECK(steps >= 10);
  CHECK(sum == steps * (steps + 1) / 2);
}

namespace {

// The rendezvous endpoint is a store of its own (`collie store serve` on
// host 0), as a cluster's service host would run it; the launchers on
// hosts 1-3 number themselves as they join, and any of them closes a
// round. Node 0 of round 0 is lost as `loss` says.
void lose_first_node_on_c10d(collie::test::Loss loss) {
  NetworkNamespaces hosts(4);
  if (const auto missing = collie::test::torch_hosts_missing(hosts); !missing.empty()) {
    WARN("skipped: " << missing);
    return;
  }
  collie::test::ScratchDir dir;
  std::ofstream(dir.file("train.py")) << collie::test::kCheckpointedSteps;
  const auto env = collie::test::job_secret(dir, "c10d-first-node-secret-0123456789abcdef");
  const auto ckpt = dir.file("ckpt.json");
  Subprocess store(hosts.exec(0, {kCollie, "store", "serve", "--port", "0", "--port-file",
                                  dir.file("port")}),
                   env);
  const auto port = collie::test::port_written(dir.file("port"));
  REQUIRE(!port.empty());
  constexpr int kSteps = 40;
  auto node = [&](int i) {
    return std::make_unique<Subprocess>(
        hosts.exec(i, {kCollie, "launch", "--nnodes=2:3", "--nproc_per_node=2",
                       "--max_restarts=3", "--rdzv_backend=c10d",
                       "--rdzv_endpoint=" + NetworkNamespaces::address(0) + ":" + port,
                       "--rdzv_conf=last_call_timeout=5,join_timeout=60", dir.file("train.py"),
                       ckpt, std::to_string(kSteps)}),
        env);
  };
  collie::test::Nodes nodes;
  for (int i = 1; i <= 3; ++i)
    nodes.push_back(node(i));
  // nodes[i] runs on host i + 1.
  collie::test::lose_first_node(nodes, ckpt, kSteps, {}, loss, [&](std::size_t lost) {
    return hosts.cut(static_cast<int>(lost) + 1);
  });
  store.signal(SIGTERM);
  CHECK(store.wait(30s));
}

}  // namespace

TEST_CASE("elastic nodes on c10d: the others resume at once without round 0's node 0 "
          "(the store hosted apart)",
          "[multihost][elastic]") {
  lose_first_node_on_c10d(collie::test::Loss::kKilled);
}

TEST_CASE("elastic nodes on c10d: round 0's node 0's host cut off, the others resume",
          "[multihost][elastic]") {
  lose_first_node_on_c10d(collie::test::Loss::kCut);
}
