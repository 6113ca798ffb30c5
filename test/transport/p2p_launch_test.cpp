// Point-to-point between real processes: the ranks are collie_p2p_worker
// (or the shipped examples) started by `collie launch`, meeting through the
// launcher's store on a free port.
#include <algorithm>
#include <csignal>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/build_paths.hpp"
#include "support/catch.hpp"
#include <fmt/format.h>

#include "support/cli.hpp"
#include "support/mesh_hello.hpp"
#include "support/raw_connection.hpp"
#include "support/scratch_dir.hpp"
#include "support/shm_skip.hpp"
#include "support/store_fixture.hpp"
#include "support/subprocess.hpp"
#include "tcp/wire.hpp"

using namespace std::chrono_literals;
using collie::test::run;
using collie::test::RunResult;
using collie::test::Subprocess;

namespace {

using collie::test::kCollie;
const std::string kWorker = collie::test::paths::kP2pWorker;
const std::string kExamples = collie::test::paths::kExamples;

// The backends between the processes of one host: each test that takes
// `transport` runs on both.
#define TRANSPORTS GENERATE(as<std::string>{}, "tcp", "shm")

RunResult launch(int ranks, const std::vector<std::string>& program,
                 const std::string& transport = "auto") {
  return collie::test::launch_ranks(kCollie, ranks, program, {"COLLIE_TRANSPORT=" + transport});
}

void require_ok(const RunResult& r, int ranks, const std::string& scenario) {
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < ranks; ++rank) {
    const auto line = "[rank " + std::to_string(rank) + "] rank " + std::to_string(rank) + ": " +
                      scenario + " ok";
    CHECK_THAT(r.out, ContainsSubstring(line));
  }
}

}  // namespace

TEST_CASE("p2p examples print what the tutorials print", "[p2p][launch]") {
  auto r = launch(2, {kExamples + "/p2p_blocking"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[rank 1] Rank 1 has data 1"));
  CHECK_THAT(r.out, ContainsSubstring("[rank 0] Rank 0 has data 1"));

  r = launch(2, {kExamples + "/p2p_nonblocking"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[rank 0] Rank 0 started sending"));
  CHECK_THAT(r.out, ContainsSubstring("[rank 1] Rank 1 started receiving"));
  CHECK_THAT(r.out, ContainsSubstring("[rank 1] Rank 1 has data 1"));
}

TEST_CASE("p2p ping-pong from 0 B to 1 MiB in every dtype and 64 MiB in float64, between processes",
          "[p2p][launch][volume]") {
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  require_ok(launch(2, {kWorker, "pingpong"}, transport), 2, "pingpong");
}

TEST_CASE("p2p tags interleaved and received out of order, between processes", "[p2p][launch]") {
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  require_ok(launch(2, {kWorker, "tags"}, transport), 2, "tags");
}

TEST_CASE("p2p 64 MiB both ways at once, between processes", "[p2p][launch][volume]") {
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  require_ok(launch(2, {kWorker, "bidirectional"}, transport), 2, "bidirectional");
}

TEST_CASE("p2p 8 ranks each send to all others", "[p2p][launch]") {
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  require_ok(launch(8, {kWorker, "all_to_all"}, transport), 8, "all_to_all");
}

TEST_CASE("p2p odd world sizes and a world of one", "[p2p][launch]") {
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  require_ok(launch(1, {kWorker, "all_to_all"}, transport), 1, "all_to_all");
  require_ok(launch(3, {kWorker, "all_to_all"}, transport), 3, "all_to_all");
}

TEST_CASE("p2p stranger at a rank's port is refused and the job goes on", "[p2p][launch]") {
  require_ok(launch(2, {kWorker, "stranger"}), 2, "stranger");
}

TEST_CASE("a job started with defaults (collie launch -n 3) refuses every forged handshake",
          "[p2p][launch][security]") {
  namespace wire = collie::transport::tcp::wire;
  collie::test::ScratchDir dir;
  const std::string go = dir.file("go");
  Subprocess job({kCollie, "launch", "-n", "3", "--", kWorker, "forged"},
                 {"COLLIE_TEST_GO_FILE=" + go});
  // Where each rank listens, the group's id and the store's port: the
  // stranger is given what it could not learn (the worst case).
  std::map<int, std::string> listening;
  std::uint64_t group = 0;
  int store_port = 0;
  while (listening.size() < 3 || group == 0) {
    const auto line = job.read_line(60s);
    REQUIRE(line);
    std::istringstream in(line->substr(line->find("] ") + 2));
    std::string what;
    in >> what;
    if (what == "listening") {
      int rank = 0;
      in >> rank;
      in >> listening[rank];
    } else if (what == "group") {
      std::string id, store;
      in >> id >> store >> store_port;
      group = std::stoull(id, nullptr, 16);
    }
  }
  int refused = 0;
  for (const auto& [to, address] : listening) {
    const auto colon = address.rfind(':');
    const auto host = address.substr(0, colon);
    const auto port = static_cast<std::uint16_t>(std::stoi(address.substr(colon + 1)));
    for (int from = 0; from < 3; ++from) {
      if (from == to) continue;
      for (const std::string token : {"", "guess", "0123456789abcdef"}) {
        INFO("a hello from rank " << from << " to rank " << to << " with token '" << token << "'");
        collie::test::RawConnection raw(port, host);
        const auto answer =
            collie::test::send_mesh_hello(raw, group, static_cast<std::uint32_t>(from),
                                          static_cast<std::uint32_t>(to), 3, token, 10s);
        REQUIRE(answer);
        CHECK(answer->verdict == wire::Verdict::Refused);
        const std::string& told = answer->reason;
        CHECK_THAT(told, ContainsSubstring("wrong token") &&
                             !ContainsSubstring(fmt::format("{:016x}", group)));
        CHECK(raw.closed_by_peer(10s));
        ++refused;
      }
    }
  }
  CHECK(refused == 18);
  // The store refuses the stranger too, with or without a guess: it cannot
  // read the job's keys, nor write the launchers' failure keys.
  for (const std::string token : {"", "guess"}) {
    collie::test::RawConnection raw(static_cast<std::uint16_t>(store_port));
    const auto status = raw.authenticate(token, 10s);
    CHECK((status == collie::store::wire::AuthStatus::Failed ||
           status == collie::store::wire::AuthStatus::Throttled));
  }
  std::ofstream(go) << "go\n";
  const auto end = job.wait(120s);
  REQUIRE(end);
  INFO(end->out << end->err);
  CHECK(end->exit_code == 0);
  for (int rank = 0; rank < 3; ++rank)
    CHECK_THAT(end->out, ContainsSubstring(fmt::format("[rank {}] rank {}: forged ok", rank, rank)));
}

TEST_CASE("p2p peer killed mid-transfer: the survivor fails within a second, naming it",
          "[p2p][launch]") {
  // Started by hand, not by `collie launch`, which would stop the survivor
  // as soon as the victim died: the point is what the survivor sees.
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  collie::test::StoreFixture store;
  auto env = [&](int rank) {
    return std::vector<std::string>{
        "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(store.server.port()),
        "WORLD_SIZE=2",          "RANK=" + std::to_string(rank),
        "COLLIE_STORE_HOSTED=1", "COLLIE_LOG_LEVEL=off",
        "COLLIE_TRANSPORT=" + transport};
  };
  Subprocess survivor({kWorker, "victim"}, env(0));
  Subprocess victim({kWorker, "victim"}, env(1));
  REQUIRE(survivor.read_line(60s) == "receiving");
  const auto died = victim.wait(60s);
  REQUIRE(died);
  CHECK(died->exit_code == 128 + SIGKILL);
  const auto seen = survivor.read_line(1s);  // one second after the death was observed
  REQUIRE(seen);
  CHECK_THAT(*seen, StartsWith("ConnectionError after") &&
                        ContainsSubstring("recv from rank 1 at 127.0.0.1:") &&
                        ContainsSubstring("of 67108864 bytes received"));
  if (transport == "tcp")
    CHECK_THAT(*seen, ContainsSubstring("closed the connection"));
  else
    CHECK_THAT(*seen, ContainsSubstring("(shared memory)") &&
                          ContainsSubstring("its process ended (it exited or was killed)"));
  const auto end = survivor.wait(10s);
  REQUIRE(end);
  CHECK(end->exit_code == 0);
}

TEST_CASE("collie bench p2p measures collie and raw TCP, alone or under launch", "[p2p][bench][volume]") {
  const std::vector<std::string> options = {"--latency-iters",
                                            "200",
                                            "--latency-warmup",
                                            "20",
                                            "--bandwidth-bytes",
                                            "1048576",
                                            "--bandwidth-iters",
                                            "4",
                                            "--json"};
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  std::vector<std::string> alone = {kCollie, "bench", "p2p"};
  alone.insert(alone.end(), options.begin(), options.end());
  auto r = run(alone, {"COLLIE_TRANSPORT=" + transport}, {}, 60s);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* name :
       {"\"collie send/recv\"", "\"raw TCP, blocking\"", "\"raw TCP, busy polling\"", "\"raw TCP\"",
        "\"ranks\": 2", "\"bandwidth_bytes\": 1048576"})
    CHECK_THAT(r.out, ContainsSubstring(name));
  // Every figure was measured: none is zero.
  const auto doc = nlohmann::json::parse(r.out);
  CHECK(doc.at("latency_one_way_us").size() == 3);
  for (const auto& l : doc.at("latency_one_way_us"))
    CHECK(l.at("median").get<double>() > 0);
  CHECK(doc.at("bandwidth_gb_per_s").size() == 2);
  for (const auto& b : doc.at("bandwidth_gb_per_s"))
    CHECK(b.at("gb_per_s").get<double>() > 0);
  CHECK_THAT(doc.at("transport").get<std::string>(),
             StartsWith(transport == "tcp" ? "tcp on " : "shm (ranks 0-1)"));

  std::vector<std::string> program = {kCollie, "bench", "p2p"};
  program.insert(program.end(), options.begin(), options.end());
  r = launch(3, program, transport);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[rank 0] {\"collie\"") && ContainsSubstring("\"ranks\": 3"));
  CHECK_THAT(r.out, !ContainsSubstring("[rank 1] {") && !ContainsSubstring("[rank 2] {"));
}
