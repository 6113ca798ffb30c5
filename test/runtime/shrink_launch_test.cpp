// ProcessGroup::shrink() between real processes (collie_shrink_worker): 8
// ranks in a loop of all_reduce steps on a store of the test's own (it
// outlives any rank); ranks killed mid-call (one, two at once, a third
// during the shrink): every survivor's call fails naming the dead within a
// second, shrink() returns within a second after that, and the survivors
// finish every step in the same processes, each sum checked against its
// step's members. A survivor that never calls shrink is named at the
// timeout. On both backends between the processes of one host. And under
// `collie launch --keep-going`, which stops no one when a rank dies.
#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <sstream>

#include "support/build_paths.hpp"
#include "support/catch.hpp"
#include <fmt/format.h>

#include "support/cli.hpp"
#include "support/shm_skip.hpp"
#include "support/clock_line.hpp"
#include "support/store_fixture.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::RunResult;
using collie::test::Subprocess;

namespace {

const std::string kWorker = collie::test::paths::kShrinkWorker;
// The sanitizers run the code several times slower: the time bounds there
// are looser (the optimized build holds the claims).
constexpr long long kSecond = COLLIE_TEST_FULL_MATRIX ? 1000 : 3000;

#define TRANSPORTS GENERATE(as<std::string>{}, "tcp", "shm")

using collie::test::clock_of;

struct Job {
  collie::test::StoreFixture store;
  std::vector<std::unique_ptr<Subprocess>> ranks;

  Job(int world, const std::vector<std::string>& args, const std::string& transport,
      const std::vector<std::string>& extra_env = {}) {
    for (int rank = 0; rank < world; ++rank) {
      std::vector<std::string> argv{kWorker};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<std::string> env{"MASTER_ADDR=127.0.0.1",
                                   "MASTER_PORT=" + std::to_string(store.server.port()),
                                   "WORLD_SIZE=" + std::to_string(world),
                                   "RANK=" + std::to_string(rank),
                                   "COLLIE_STORE_HOSTED=1",
                                   "COLLIE_LOG_LEVEL=off",
                                   "COLLIE_TRANSPORT=" + transport};
      env.insert(env.end(), extra_env.begin(), extra_env.end());
      ranks.push_back(std::make_unique<Subprocess>(argv, env));
    }
  }

  // Every line rank `r` prints until it ends, and how it ended.
  std::vector<std::string> lines_of(int r, int& exit_code) {
    auto& p = *ranks[static_cast<std::size_t>(r)];
    std::vector<std::string> lines;
    while (auto line = p.read_line(120s))
      lines.push_back(*line);
    const auto end = p.wait(30s);
    exit_code = end ? end->exit_code : -1;
    return lines;
  }
};

// The first line of `lines` that starts with "rank R: " + `what`.
std::optional<std::string> line_of(const std::vector<std::string>& lines, int r,
                                   const std::string& what) {
  const auto prefix = "rank " + std::to_string(r) + ": " + what;
  for (const auto& l : lines)
    if (l.rfind(prefix, 0) == 0) return l;
  return std::nullopt;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines)
    out += l + "\n";
  return out;
}

// `collie launch --keep-going` of the worker on `n` ranks (with
// --max-restarts when `restarts` > 0), its logging off; its output goes
// with any later failure's report.
RunResult keep_going(int n, int restarts, const std::vector<std::string>& worker,
                     std::vector<std::string> env = {}) {
  std::vector<std::string> args{"--nproc_per_node", std::to_string(n), "--keep-going"};
  if (restarts > 0) {
    args.push_back("--max-restarts");
    args.push_back(std::to_string(restarts));
  }
  args.push_back(kWorker);
  args.insert(args.end(), worker.begin(), worker.end());
  env.push_back("COLLIE_LOG_LEVEL=off");
  auto r = collie::test::collie_cli("launch", args, env, 180s);
  UNSCOPED_INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE_FALSE(r.timed_out);
  return r;
}

// Runs 8 ranks, kills `victims` at step 3 of 8 (and `late` during the
// shrink), and checks what every survivor saw.
void killed_and_shrunk(const std::vector<int>& victims, int late) {
  const std::string transport = TRANSPORTS;
  COLLIE_SKIP_WITHOUT_SHM(transport);
  INFO("transport " << transport);
  std::string list;
  for (int v : victims)
    list += (list.empty() ? "" : ",") + std::to_string(v);
  Job job(8, {"8", "3", list, std::to_string(late)}, transport);
  long long death = 0;
  for (int v : victims) {
    int code = 0;
    const auto lines = job.lines_of(v, code);
    INFO("victim " << v << ":\n" << joined(lines));
    const auto dying = line_of(lines, v, "dying (clock");
    REQUIRE(dying);
    death = std::max(death, *clock_of(*dying));
    CHECK(code == 128 + SIGKILL);
  }
  std::vector<int> survivors;
  for (int r = 0; r < 8; ++r)
    if (std::find(victims.begin(), victims.end(), r) == victims.end() && r != late)
      survivors.push_back(r);
  std::string members;
  for (int r : survivors)
    members += (members.empty() ? "" : ", ") + std::to_string(r);
  for (int r : survivors) {
    int code = 0;
    const auto lines = job.lines_of(r, code);
    INFO("rank " << r << ":\n" << joined(lines));
    CHECK(code == 0);
    // Its call failed, naming a victim, within a second of the last death
    // (a survivor may have finished step 3 before it saw the death: then
    // its step 4 fails).
    const auto failed = line_of(lines, r, "failed at step ");
    REQUIRE(failed);
    CHECK(*clock_of(*failed) - death < kSecond);
    bool named = false;
    for (int v : victims)
      named = named || failed->find(fmt::format("rank {} at 127.0.0.1", v)) != std::string::npos ||
              failed->find(fmt::format("rank {} ", v)) != std::string::npos;
    CHECK(named);
    // The shrink: within a second of the failure, the survivors and no one
    // else (where a third died during it, after a second shrink).
    std::optional<std::string> shrunk;
    for (const auto& l : lines)
      if (l.rfind(fmt::format("rank {}: shrunk to ", r), 0) == 0) shrunk = l;
    REQUIRE(shrunk);
    CHECK_THAT(*shrunk, ContainsSubstring(fmt::format("shrunk to {} members [{}]", survivors.size(),
                                                    members)));
    if (late < 0) CHECK(*clock_of(*shrunk) - *clock_of(*failed) < kSecond);
    CHECK(line_of(lines, r, fmt::format("done 8 steps, {} members, sums ok", survivors.size())));
  }
  if (late >= 0) {
    int code = 0;
    const auto lines = job.lines_of(late, code);
    INFO("late " << late << ":\n" << joined(lines));
    CHECK(line_of(lines, late, "dying during the shrink"));
    CHECK(code == 128 + SIGKILL);
  }
}

}  // namespace

TEST_CASE("shrink: rank 5 killed mid-call, the 7 others go on in place", "[shrink][launch]") {
  killed_and_shrunk({5}, -1);
}

TEST_CASE("shrink: ranks 2 and 5 killed at once, the 6 others go on in place",
          "[shrink][launch]") {
  killed_and_shrunk({2, 5}, -1);
}

TEST_CASE("shrink: a third rank dies during the shrink, the 5 others go on in place",
          "[shrink][launch]") {
  killed_and_shrunk({2, 5}, 6);
}

TEST_CASE("shrink: a survivor that never calls shrink is named at the timeout",
          "[shrink][launch]") {
  const std::string transport = "tcp";
  // Rank 3 stays alive elsewhere in its program.
  Job job(4, {"6", "2", "1", "3", "stay"}, transport, {"COLLIE_TIMEOUT=4"});
  for (int r : {0, 2}) {
    int code = 0;
    const auto lines = job.lines_of(r, code);
    INFO("rank " << r << ":\n" << joined(lines));
    CHECK(code == 2);
    const auto failed = line_of(lines, r, "failed at step ");
    const auto gave_up = line_of(lines, r, "shrink failed");
    REQUIRE(failed);
    REQUIRE(gave_up);
    CHECK_THAT(*gave_up, ContainsSubstring("have not called shrink") &&
                             ContainsSubstring("rank 3 at 127.0.0.1"));
    // At the timeout (4 s), not before.
    CHECK(*clock_of(*gave_up) - *clock_of(*failed) >= 3500);
  }
  job.ranks[3]->signal(SIGKILL);
}

TEST_CASE("launch --keep-going: a rank's death stops no one, and the summary names it",
          "[shrink][launch]") {
  const auto r = keep_going(4, 0, {"6", "2", "1"});
  CHECK(r.exit_code == 0);
  for (int rank : {0, 2, 3})
    CHECK_THAT(r.out, ContainsSubstring(fmt::format("[rank {}] rank {}: done 6 steps, 3 members, "
                                                  "sums ok", rank, rank)));
  CHECK_THAT(r.err, ContainsSubstring("rank 1 (node 0, pid ") &&
                        ContainsSubstring("killed by SIGKILL") &&
                        ContainsSubstring("the others go on (--keep-going)"));
  CHECK_THAT(r.err, ContainsSubstring("rank 1 lost (--keep-going); 3 of the node's 4 ranks exited 0"));
}

TEST_CASE("launch --keep-going: when every rank fails, the job fails naming the first",
          "[shrink][launch]") {
  // Two ranks, both victims at step 0.
  const auto r = keep_going(2, 0, {"3", "0", "0,1"});
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK_THAT(r.err, ContainsSubstring("ranks 0, 1 lost (--keep-going); 0 of the node's 2 ranks "
                                    "exited 0") ||
                        ContainsSubstring("ranks 1, 0 lost (--keep-going); 0 of the node's 2 ranks "
                                        "exited 0"));
  CHECK_THAT(r.err, ContainsSubstring("failed first: killed by SIGKILL"));
}

TEST_CASE("launch --keep-going --max-restarts 1: a replacement joins at expand(), takes the "
          "state, and the job ends with 8 ranks",
          "[shrink][expand][launch]") {
  // Rank 5 dies in step 3 of 10; the launcher starts a process in its
  // place, which the 7 admit at their next expand() (before step 6 at the
  // latest: they wait for it there) and hand the step and the running total.
  const auto r = keep_going(8, 1, {"10", "3", "5"}, {"WORKER_EXPAND_STEP=6"});
  CHECK(r.exit_code == 0);
  // Where the survivors went on (R) and where the newcomer joined (J).
  std::istringstream out(r.out);
  int resumed = -1, joined = -1;
  for (std::string line; std::getline(out, line);) {
    if (const auto at = line.find("] at step "); at != std::string::npos &&
                                                 line.find("shrunk to 7 members") != std::string::npos)
      resumed = std::stoi(line.substr(at + 10));
    if (const auto at = line.find("joined as rank 7 of 8 at step "); at != std::string::npos)
      joined = std::stoi(line.substr(at + 30));
  }
  REQUIRE(resumed >= 3);
  REQUIRE(joined >= resumed);
  REQUIRE(joined <= 6);
  // The total every process must end with, step by step: each step's sum
  // over its members of (id + 1) * (step + 1); the newcomer's id is 107.
  double total = 0;
  for (int s = 0; s < 10; ++s) {
    const int ids = s < resumed ? 36 : s < joined ? 36 - 6 : 36 - 6 + 108;
    total += ids * (s + 1);
  }
  const auto state = fmt::format("sums ok, state {:.6f}", total);
  for (int rank : {0, 1, 2, 3, 4, 6, 7})
    CHECK_THAT(r.out, ContainsSubstring(fmt::format("[rank {}] rank {}: done 10 steps, 8 members, {}",
                                                  rank, rank, state)));
  CHECK_THAT(r.out, ContainsSubstring("[rank 5 replacement] rank 107: done 10 steps, 8 members, " +
                                    state));
  CHECK_THAT(r.err, ContainsSubstring("in place of rank 5 (restart 1 of --max-restarts 1): it joins "
                                    "the others at their next expand()"));
  CHECK_THAT(r.err, ContainsSubstring("rank 5 lost (--keep-going); 8 of the node's 9 processes "
                                    "exited 0"));
  CHECK_THAT(r.err, ContainsSubstring("rank 5: pid ") && ContainsSubstring(", and exit code 0"));
}

TEST_CASE("launch --keep-going --max-restarts 1: a replacement the others never admit is "
          "stopped once they have ended",
          "[shrink][expand][launch]") {
  // No expand() in this worker's loop (no WORKER_EXPAND_STEP): the
  // replacement of rank 1 waits in vain, and must not hold the job for its
  // whole timeout.
  const auto r = keep_going(4, 1, {"6", "2", "1"});
  CHECK(r.exit_code == 0);
  for (int rank : {0, 2, 3})
    CHECK_THAT(r.out, ContainsSubstring(fmt::format("[rank {}] rank {}: done 6 steps, 3 members", rank,
                                                  rank)));
  CHECK_THAT(r.err, ContainsSubstring("never joined them: the job's members called no expand() "
                                    "after it came; stopping it"));
  CHECK_THAT(r.err, ContainsSubstring("rank 1 lost (--keep-going); 3 of the node's 5 processes "
                                    "exited 0"));
  CHECK_THAT(r.err, ContainsSubstring("but the others never admitted it (stopped by collie launch)"));
}
