// Jobs across real network boundaries: three hosts made of network
// namespaces on a bridge (support/netns.hpp), 10.77.0.1 to .3. A test skips,
// saying why, where namespaces cannot be made (not root, no iproute2).
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "support/build_paths.hpp"
#include "support/catch.hpp"

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/netns.hpp"
#include "support/read_file.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::NetworkNamespaces;
using collie::test::read_file;
using collie::test::Subprocess;

namespace {

using collie::test::kCollie;
const std::string kWorker = collie::test::paths::kCollectiveWorker;
const std::string kToken = "multi-host-test-secret-0123456789abcdef";


// The job's store on host 0 (10.77.0.1), on a port it picks (port 0), for
// ranks started by hand: `collie store serve` says which port it got.
struct HostStore {
  explicit HostStore(const NetworkNamespaces& hosts)
      : server(hosts.exec(0, {kCollie, "store", "serve", "--host", NetworkNamespaces::address(0),
                              "--port", "0"}),
               {"COLLIE_STORE_TOKEN=" + kToken, "COLLIE_LOG_LEVEL=off"}) {
    // "collie store listening on ADDRESS... port PORT (...)": its digits.
    const auto line = server.read_line(60s);
    if (line && line->rfind(" port ") != std::string::npos) {
      const auto at = line->rfind(" port ") + 6;
      port = line->substr(at, line->find_first_not_of("0123456789", at) - at);
    }
  }
  ~HostStore() { server.signal(SIGTERM); }

  // The environment of world rank `rank` of `world` on this store.
  std::vector<std::string> env(int rank, int world, std::vector<std::string> extra = {}) const {
    std::vector<std::string> e{"MASTER_ADDR=" + NetworkNamespaces::address(0),
                               "MASTER_PORT=" + port,
                               "WORLD_SIZE=" + std::to_string(world),
                               "RANK=" + std::to_string(rank),
                               "COLLIE_STORE_HOSTED=1",
                               "COLLIE_STORE_TOKEN=" + kToken,
                               "COLLIE_LOG_LEVEL=off"};
    e.insert(e.end(), extra.begin(), extra.end());
    return e;
  }

  Subprocess server;
  std::string port;  // empty: it did not come up
};

// One `collie_collective_worker loop [COUNT]` rank per host, on `store`,
// each past its fifth all_reduce ("rank R: looping") when this returns.
std::vector<std::unique_ptr<Subprocess>> start_looping(const NetworkNamespaces& hosts,
                                                       const HostStore& store, int world,
                                                       std::vector<std::string> loop_args,
                                                       const std::vector<std::string>& env) {
  std::vector<std::unique_ptr<Subprocess>> ranks;
  loop_args.insert(loop_args.begin(), {kWorker, "loop"});
  for (int i = 0; i < world; ++i)
    ranks.push_back(std::make_unique<Subprocess>(hosts.exec(i, loop_args), store.env(i, world, env)));
  for (int i = 0; i < world; ++i)
    REQUIRE(ranks[static_cast<std::size_t>(i)]->read_line(120s) ==
            "rank " + std::to_string(i) + ": looping");
  return ranks;
}

// Kills a rank that did not say what was waited for, and fails with its
// standard error (its warnings) and `more`.
[[noreturn]] void fail_silent(Subprocess& rank, const std::string& what, const std::string& more) {
  rank.signal(SIGKILL);
  const auto r = rank.wait(10s);
  FAIL(what << more << "its stderr:\n" << (r ? r->err : "?"));
  std::abort();  // (FAIL throws)
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
      CHECK_THAT(r->out, ContainsSubstring("[rank " + std::to_string(rank) + "] rank " +
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
  // first), on a store of the test's own on host 0.
  HostStore store(hosts);
  REQUIRE_FALSE(store.port.empty());
  auto ranks = start_looping(hosts, store, 3, {}, {"COLLIE_LOG_LEVEL=warn"});
  REQUIRE(hosts.cut(2));
  const auto cut = std::chrono::steady_clock::now();
  for (int i : {0, 1}) {
    auto& rank = *ranks[static_cast<std::size_t>(i)];
    const auto line = rank.read_line(60s);
    const auto after = std::chrono::steady_clock::now() - cut;
    if (!line) {
      // Where it waits: its host's TCP connections, and its warnings.
      const auto sockets = collie::test::run(hosts.exec(i, {"ss", "-tnoi"}), {}, {}, 10s);
      fail_silent(rank, "rank " + std::to_string(i) + " said nothing in 60 s; ",
                  "its host's sockets:\n" + sockets.out + sockets.err);
    }
    INFO(*line);
    CHECK_THAT(*line, StartsWith("rank " + std::to_string(i) + ": failed after "));
    CHECK_THAT(*line, ContainsSubstring("rank 2 at 10.77.0.3:"));
    CHECK_THAT(*line, ContainsSubstring("cannot be reached") || ContainsSubstring("as rank"));
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
  HostStore store(hosts);
  REQUIRE_FALSE(store.port.empty());
  auto rank_on = [&](int host, int rank, std::vector<std::string> extra) {
    return std::make_unique<Subprocess>(hosts.exec(host, {kWorker, "stall", "0"}),
                                        store.env(rank, 3, std::move(extra)));
  };
  {
    // Host 1 would advertise 127.0.0.1 to a job whose master is 10.77.0.1:
    // refused at once, naming the interface and the master.
    auto r = rank_on(1, 1, {"COLLIE_SOCKET_IFNAME=lo", "COLLIE_TIMEOUT=4"})->wait(60s);
    REQUIRE(r);
    INFO(r->err);
    CHECK(r->exit_code == 1);
    CHECK_THAT(r->err, ContainsSubstring("COLLIE_SOCKET_IFNAME='lo' makes this rank advertise "
                                       "127.0.0.1 on 'lo'") &&
                           ContainsSubstring("the job's master 10.77.0.1 is on another host"));
  }
  // Ranks 0 and 1 come; host 2's rank never does.
  auto r0 = rank_on(0, 0, {"COLLIE_TIMEOUT=4"});
  auto r1 = rank_on(1, 1, {"COLLIE_TIMEOUT=4"});
  for (auto* p : {r0.get(), r1.get()}) {
    const auto r = p->wait(60s);
    REQUIRE(r);
    INFO(r->err);
    CHECK(r->exit_code == 1);
    CHECK_THAT(r->err, ContainsSubstring("for all 3 ranks to join, and rank 2 never joined (joined: "
                                       "rank 0 at 10.77.0.1:") &&
                           ContainsSubstring("rank 1 at 10.77.0.2:"));
  }
}

TEST_CASE("two hosts: a host cut while its rank's receive window is closed is named within 10 s",
          "[multihost]") {
  // Rank 1 stops reading (SIGSTOP), so what rank 0 sends it fills its window
  // and rank 0's kernel probes the zero window: no data is in flight to be
  // retransmitted, and keep-alive does not probe a connection with data
  // queued. Then rank 1's host goes silent, and only the unanswered window
  // probes tell rank 0 that the host is gone. With lanes, the window that
  // closes may be a lane's, while the pair's connection waits unread
  // (paused, or on the lanes of a striped message) and its keep-alive
  // verdict must still be heard.
  const std::string streams = GENERATE(as<std::string>{}, "1", "4");
  INFO("COLLIE_STREAMS=" << streams);
  NetworkNamespaces hosts(2);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  HostStore store(hosts);
  REQUIRE_FALSE(store.port.empty());
  auto ranks = start_looping(hosts, store, 2, {std::to_string(std::size_t{1} << 23)},  // 32 MiB
                             {"COLLIE_LOG_LEVEL=warn", "COLLIE_STALL_TIME=1",
                              "COLLIE_STREAMS=" + streams});
  ranks[1]->signal(SIGSTOP);
  // The stall inspector's report: rank 0 has waited a second for rank 1.
  if (!ranks[0]->wait_for_stderr("does not answer", 60s))
    fail_silent(*ranks[0], "rank 0 made no stall report in 60 s; ", "");
  REQUIRE(hosts.cut(1));
  const auto cut = std::chrono::steady_clock::now();
  const auto line = ranks[0]->read_line(60s);
  const auto after = std::chrono::steady_clock::now() - cut;
  ranks[1]->signal(SIGKILL);
  REQUIRE(line);
  INFO(*line);
  CHECK_THAT(*line, StartsWith("rank 0: failed after "));
  CHECK_THAT(*line, ContainsSubstring("rank 1 at 10.77.0.2:") &&
                        ContainsSubstring("cannot be reached"));
  CHECK(after < 10s);
}

TEST_CASE("three hosts, ranks numbered round robin and hosts of different sizes: every "
          "collective and algorithm, checked",
          "[multihost][hosts][volume]") {
  // Real hosts as the transports see them (a network namespace each):
  // shared memory within a host, TCP over the bridge between, the group's
  // host map from the identities the ranks publish, rings by host and
  // two_level across them. Every element of every case is checked.
  NetworkNamespaces hosts(3);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  struct Layout {
    std::vector<int> host_of;  // by rank
    std::string described;
  };
  const std::vector<Layout> layouts = {
      {{0, 1, 2, 0, 1, 2}, "3 hosts x 2 ranks, round robin"},
      {{0, 0, 1, 2, 2}, "3 hosts (2, 1, 2 ranks), by host"}};
  for (const auto& layout : layouts) {
    INFO(layout.described);
    const int world = static_cast<int>(layout.host_of.size());
    // One job: every rank on its host, on a store of the job's own.
    const auto job = [&](const std::vector<std::string>& command, const std::string& extra) {
      HostStore store(hosts);
      REQUIRE_FALSE(store.port.empty());
      std::vector<std::unique_ptr<Subprocess>> ranks;
      for (int r = 0; r < world; ++r) {
        ranks.push_back(std::make_unique<Subprocess>(
            hosts.exec(layout.host_of[static_cast<std::size_t>(r)], command),
            store.env(r, world, {"COLLIE_SOCKET_IFNAME=cv", extra})));
      }
      std::vector<collie::test::RunResult> results;
      for (int r = 0; r < world; ++r) {
        auto result = ranks[static_cast<std::size_t>(r)]->wait(300s);
        REQUIRE(result);
        results.push_back(std::move(*result));
      }
      return results;
    };
    const auto matrix = job({kWorker, "matrix", "smoke"}, "COLLIE_SEGMENT_BYTES=1024");
    for (int r = 0; r < world; ++r) {
      const auto& result = matrix[static_cast<std::size_t>(r)];
      INFO("rank " << r << " stdout:\n" << result.out << "\nstderr:\n" << result.err);
      CHECK(result.exit_code == 0);
      CHECK_THAT(result.out, ContainsSubstring("rank " + std::to_string(r) + ": matrix ok ("));
      // Each rank's peers on its own host through shared memory, the
      // others over TCP.
      const bool alone = std::count(layout.host_of.begin(), layout.host_of.end(),
                                    layout.host_of[static_cast<std::size_t>(r)]) == 1;
      if (alone)
        CHECK_THAT(result.out, !ContainsSubstring("shm ("));
      else
        CHECK_THAT(result.out, ContainsSubstring("shm ("));
      CHECK_THAT(result.out, ContainsSubstring("tcp on 10.77.0."));
    }
    // What the group learned of its hosts, as bench's header says it.
    const auto bench =
        job({kCollie, "bench", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w", "0"},
            "COLLIE_LOG_LEVEL=warn");
    for (int r = 0; r < world; ++r) {
      INFO("bench rank " << r << " stderr:\n" << bench[static_cast<std::size_t>(r)].err);
      CHECK(bench[static_cast<std::size_t>(r)].exit_code == 0);
    }
    CHECK_THAT(bench[0].out, ContainsSubstring("#  hosts: " + layout.described));
  }
}

TEST_CASE("two hosts on a shaped link: init measures the link Auto prices with, unless "
          "COLLIE_HOST_LINK says it",
          "[multihost][hosts]") {
  // Each host's link shaped to 400 Mbit/s as tools/cluster.sh shapes them
  // (tbf, whose bucket lets its first 256 KB by at once: a probe that
  // timed small transfers would read several times the rate).
  NetworkNamespaces hosts(2);
  if (!hosts.ok()) {
    WARN("skipped: " << hosts.why());
    return;
  }
  if (!hosts.shape(0, "400mbit") || !hosts.shape(1, "400mbit")) {
    WARN("skipped: " << hosts.why());
    return;
  }
  // bench's header on rank 0 of a 2-rank job, one rank a host.
  const auto header = [&](const std::string& extra) {
    HostStore store(hosts);
    REQUIRE_FALSE(store.port.empty());
    std::vector<std::unique_ptr<Subprocess>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::make_unique<Subprocess>(
          hosts.exec(r, {kCollie, "bench", "all_reduce", "-b", "8", "-e", "8", "-n", "1", "-w",
                         "0"}),
          store.env(r, 2, {"COLLIE_SOCKET_IFNAME=cv", "COLLIE_LOG_LEVEL=warn", extra})));
    }
    std::string out;
    for (int r = 0; r < 2; ++r) {
      const auto result = ranks[static_cast<std::size_t>(r)]->wait(300s);
      REQUIRE(result);
      INFO("rank " << r << " stderr:\n" << result->err);
      REQUIRE(result->exit_code == 0);
      if (r == 0) out = result->out;
    }
    const auto at = out.find("#  hosts: ");
    REQUIRE(at != std::string::npos);
    return out.substr(at, out.find('\n', at) - at);
  };
  // "#  hosts: 2 hosts x 1 rank, by host; link 0.384 Gbit/s, 8 us
  // (measured between rank 0 and rank 1 in 140 ms)"
  const auto gbits_in = [](const std::string& measured) {
    const auto link = measured.find("; link ");
    REQUIRE(link != std::string::npos);
    return std::strtod(measured.c_str() + link + 7, nullptr);
  };
  // tbf moves 0.96 of its rate: 0.383. Under the sanitizers the probe's
  // copies are the slower part (TSan read 0.297 Gbit/s, 2 ms of latency):
  // what the job itself can move, so only the upper bound holds there (a
  // probe fooled by tbf's bucket, or the 10 Gbit/s default, reads above it).
  const double lowest = COLLIE_TEST_FULL_MATRIX ? 0.30 : 0.05;
  // And under the sanitizers beside the other tests the probe's timing
  // moves up as well: TSan read 0.487 Gbit/s three times in a row in a full
  // run (and 0.38 alone), and on 2026-12-07 0.659 three times (round trips
  // of 885 us; 0.34 alone); 0.8 still refuses the 10 Gbit/s default and a
  // probe fooled by tbf's bucket (several times the rate).
  const double highest = COLLIE_TEST_FULL_MATRIX ? 0.44 : 0.8;
  // A measurement on a machine the other tests keep busy: a pause in the
  // probe's transfers moved it to 0.56-0.62 Gbit/s, with round trips of
  // 0.2-1 ms. Up to three jobs, the first that reads the link.
  std::string measured;
  double gbits = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    measured = header("");
    gbits = gbits_in(measured);
    if (gbits > lowest && gbits < highest) break;
  }
  INFO(measured);
  CHECK(gbits > lowest);
  CHECK(gbits < highest);
  CHECK_THAT(measured, ContainsSubstring("(measured between rank 0 and rank 1 in "));
  const auto told = header("COLLIE_HOST_LINK=25,7");
  CHECK_THAT(told, EndsWith("; link 25 Gbit/s, 7 us (COLLIE_HOST_LINK)"));
}
