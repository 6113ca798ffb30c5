// `collie launch`: ranks, environment, output, failures, restarts, signals,
// several nodes. The ranks are small /bin/sh programs.
#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <signal.h>
#include <sstream>
#include <sys/file.h>
#include <thread>
#include <unistd.h>

#include "support/build_paths.hpp"
#include "support/catch.hpp"
#include <collie/host_cpus.hpp>
#include <fmt/format.h>

#include <collie/store/client.hpp>

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/name_resolution.hpp"
#include "support/scratch_dir.hpp"
#include "support/store_fixture.hpp"
#include "support/subprocess.hpp"
#include "collie/launch/keys.hpp"  // tools/collie/launch/

using namespace std::chrono_literals;
using collie::test::run;
using collie::test::RunResult;
using collie::test::Subprocess;

namespace {

using collie::test::kCollie;

RunResult launch(std::vector<std::string> options, const std::string& script,
                 std::chrono::milliseconds timeout = 60s) {
  options.insert(options.end(), {"--", "/bin/sh", "-c", script});
  return collie::test::collie_cli("launch", options, {}, timeout);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("launch gives every rank torchrun's environment and a free store port", "[launch]") {
  const auto r = launch({"-n", "4"},
                        "echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK "
                        "$GROUP_WORLD_SIZE $COLLIE_RESTART_COUNT $COLLIE_STORE_HOSTED "
                        "$MASTER_ADDR $MASTER_PORT\"");
  REQUIRE(r.exit_code == 0);
  auto lines = lines_of(r.out);
  REQUIRE(lines.size() == 4);
  std::sort(lines.begin(), lines.end());
  std::set<std::string> ports;
  for (int rank = 0; rank < 4; ++rank) {
    const auto& line = lines[static_cast<std::size_t>(rank)];
    const std::string prefix = "[rank " + std::to_string(rank) + "] ";
    REQUIRE_THAT(line, StartsWith(prefix));
    std::istringstream fields(line.substr(prefix.size()));
    std::string rank_s, local, world, local_world, group, groups, restart, hosted, addr, port;
    fields >> rank_s >> local >> world >> local_world >> group >> groups >> restart >> hosted >>
        addr >> port;
    CHECK(rank_s == std::to_string(rank));
    CHECK(local == std::to_string(rank));
    CHECK(world == "4");
    CHECK(local_world == "4");
    CHECK(group == "0");
    CHECK(groups == "1");
    CHECK(restart == "0");
    CHECK(hosted == "1");
    CHECK(addr == "127.0.0.1");
    CHECK(std::stoi(port) > 0);
    ports.insert(port);
  }
  CHECK(ports.size() == 1);
}

TEST_CASE("a child's environment: an override replaces the variable, the last of a name wins",
          "[launch]") {
  // ExecArgs builds every child's environment, `collie launch`'s ranks too.
  ::setenv("COLLIE_TEST_INHERITED", "parent", 1);
  const auto r = run({"/usr/bin/env"}, {"COLLIE_TEST_INHERITED=child", "COLLIE_TEST_TWICE=first",
                                        "COLLIE_TEST_TWICE=second"});
  ::unsetenv("COLLIE_TEST_INHERITED");
  INFO(r.out);
  CHECK(r.exit_code == 0);
  std::istringstream in(r.out);
  std::vector<std::string> ours;
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("COLLIE_TEST_")) ours.push_back(line);
  std::sort(ours.begin(), ours.end());
  CHECK(ours == std::vector<std::string>{"COLLIE_TEST_INHERITED=child", "COLLIE_TEST_TWICE=second"});
}

TEST_CASE("launch hosts a store the ranks can use", "[launch]") {
  // Every rank adds 1 and waits until all have: the store is really there.
  const std::string script = kCollie + " store add arrived 1 >/dev/null && while [ \"$(" + kCollie +
                             " store get arrived)\" != 3 ]; do sleep 0.05; done; " +
                             "echo all three";
  const auto r = launch({"-n", "3"}, script);
  CHECK(r.exit_code == 0);
  CHECK(lines_of(r.out).size() == 3);
  CHECK_THAT(r.out, ContainsSubstring("[rank 2] all three"));
}

TEST_CASE("launch prefixes stdout and stderr separately, and keeps a last partial line",
          "[launch]") {
  const auto r = launch({"-n", "2"}, "echo out-$RANK; echo err-$RANK >&2; printf tail-$RANK");
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("[rank 0] out-0\n") && ContainsSubstring("[rank 1] out-1\n") &&
                        ContainsSubstring("[rank 0] tail-0\n") &&
                        ContainsSubstring("[rank 1] tail-1\n"));
  CHECK_THAT(r.err, ContainsSubstring("[rank 0] err-0\n") && ContainsSubstring("[rank 1] err-1\n"));
  CHECK_THAT(r.out, !ContainsSubstring("err-"));
  CHECK(lines_of(r.out).size() == 4);
}

TEST_CASE("a failing rank stops the others at once, and the summary names it", "[launch]") {
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch({"-n", "3"}, "if [ $RANK = 1 ]; then sleep 0.3; exit 3; fi; sleep 60");
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, ContainsSubstring("rank 1 (node 0, pid") &&
                        ContainsSubstring("failed first: exit code 3"));
  CHECK_THAT(r.err, ContainsSubstring("<- failed first"));
  CHECK_THAT(r.err, ContainsSubstring("stopped by collie launch (killed by SIGTERM)"));
  CHECK_THAT(r.err, ContainsSubstring("no restarts left"));
}

TEST_CASE("a rank killed by a signal gives 128 + the signal", "[launch]") {
  const auto r = launch({"-n", "2"}, "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60");
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK_THAT(r.err, ContainsSubstring("rank 0") && ContainsSubstring("killed by SIGKILL"));
}

TEST_CASE("ranks that ignore SIGTERM are killed after --stop-timeout", "[launch]") {
  // Rank 1 fails once rank 0 has set its trap (rank 0 says so in a file).
  collie::test::ScratchDir dir;
  const auto trapped = dir.file("trapped");
  const auto start = std::chrono::steady_clock::now();
  const auto r = launch({"-n", "2", "--stop-timeout", "0.5"},
                        fmt::format("if [ $RANK = 1 ]; then while [ ! -e {0} ]; do sleep 0.01; "
                                    "done; exit 4; fi; trap '' TERM; touch {0}; "
                                    "while true; do sleep 0.1; done",
                                    trapped));
  CHECK(std::chrono::steady_clock::now() - start < 20s);
  CHECK(r.exit_code == 4);
  CHECK_THAT(r.err, ContainsSubstring("sending SIGKILL") && ContainsSubstring("killed by SIGKILL"));
}

TEST_CASE("launch --max-restarts restarts the whole group until it succeeds", "[launch]") {
  const auto r = launch({"-n", "2", "--max-restarts", "3"},
                        "echo attempt $COLLIE_RESTART_COUNT; "
                        "if [ $COLLIE_RESTART_COUNT -lt 2 ] && [ $RANK = 1 ]; then exit 5; fi");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("restarting every rank (restart 1 of 3)") &&
                        ContainsSubstring("restarting every rank (restart 2 of 3)"));
  CHECK_THAT(r.err, !ContainsSubstring("restart 3 of 3"));
  CHECK_THAT(r.out, ContainsSubstring("[rank 0] attempt 2") && ContainsSubstring("[rank 1] attempt 2"));
}

TEST_CASE("launch --max-restarts gives up after the last restart", "[launch]") {
  const auto r = launch({"-n", "2", "--max-restarts", "1"}, "[ $RANK = 0 ] || exit 9");
  CHECK(r.exit_code == 9);
  CHECK_THAT(r.err, ContainsSubstring("restart 1 of 1") &&
                        ContainsSubstring("no restarts left (--max-restarts 1)"));
}

TEST_CASE("SIGTERM and SIGINT to the launcher reach every rank once", "[launch]") {
  for (int sig : {SIGTERM, SIGINT}) {
    const std::string name = sig == SIGTERM ? "TERM" : "INT";
    Subprocess launcher(
        {kCollie, "launch", "-n", "2", "--", "/bin/sh", "-c",
         "trap 'echo got " + name + "; exit 0' " + name + "; echo ready; sleep 60 & wait"});
    for (int i = 0; i < 2; ++i)
      REQUIRE(launcher.read_line(30s));
    launcher.signal(sig);
    auto r = launcher.wait(30s);
    REQUIRE(r);
    CHECK(r->exit_code == 128 + sig);
    CHECK_THAT(r->out,
               ContainsSubstring("[rank 0] got " + name) && ContainsSubstring("[rank 1] got " + name));
    CHECK_THAT(r->err, ContainsSubstring("received SIG" + name));
  }
}

namespace {

// The processes whose parent is `parent` (from /proc), and whether one is
// still alive (a zombie waiting for its new parent to reap it is dead).
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const auto name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    std::istringstream fields(line.substr(line.rfind(')') + 2));
    char state = 0;
    pid_t ppid = 0;
    fields >> state >> ppid;
    if (ppid == parent) found.push_back(static_cast<pid_t>(std::stoi(name)));
  }
  return found;
}

bool alive(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  return line.substr(line.rfind(')') + 2, 1) != "Z";
}

}  // namespace

TEST_CASE("ranks die with their launcher, even one killed by SIGKILL", "[launch]") {
  Subprocess launcher({kCollie, "launch", "-n", "2", "--", "sleep", "60"});
  std::vector<pid_t> ranks;
  collie::test::eventually([&] {
    ranks = children_of(launcher.pid());
    return ranks.size() >= 2;
  }, 30s);
  REQUIRE(ranks.size() == 2);
  launcher.signal(SIGKILL);
  REQUIRE(launcher.wait(10s));
  auto any_alive = [&] {
    return std::any_of(ranks.begin(), ranks.end(), [](pid_t p) { return alive(p); });
  };
  CHECK(collie::test::eventually([&] { return !any_alive(); }, 10s));
  for (const pid_t p : ranks)
    if (alive(p)) ::kill(p, SIGKILL);  // not left behind if the check failed
}

TEST_CASE("a launcher killed by SIGKILL leaves its folder, and the next one of its user removes it",
          "[launch]") {
  const collie::test::ScratchDir tmp;
  const std::vector<std::string> env = {"TMPDIR=" + tmp.path().string()};
  namespace fs = std::filesystem;
  auto launch_dirs = [&] {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path()))
      if (e.path().filename().string().rfind("collie-launch-", 0) == 0)
        names.insert(e.path().filename().string());
    return names;
  };
  // A live launcher's folder (its lock held, here by this test), and one
  // without a lock file (an older launcher's): both left alone.
  fs::create_directories(tmp.path() / "collie-launch-live");
  const int held = ::open((tmp.path() / "collie-launch-live" / ".lock").c_str(),
                          O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  fs::create_directories(tmp.path() / "collie-launch-unlocked");

  std::string killed;
  {
    Subprocess launcher({kCollie, "launch", "-n", "1", "--", "sleep", "60"}, env);
    REQUIRE(collie::test::eventually([&] {
      for (const auto& name : launch_dirs())
        if (name != "collie-launch-live" && name != "collie-launch-unlocked" &&
            fs::exists(tmp.path() / name / ".lock"))
          killed = name;
      return !killed.empty();
    }, 30s));
    launcher.signal(SIGKILL);
    REQUIRE(launcher.wait(10s));
  }
  CHECK(fs::exists(tmp.path() / killed));  // nothing could remove it

  const auto r = collie::test::collie_cli("launch", {"-n", "1", "--", "/bin/true"}, env);
  CHECK(r.exit_code == 0);
  // The killed launcher's folder is gone, the others stay, and the new
  // launcher removed its own.
  CHECK(launch_dirs() == std::set<std::string>{"collie-launch-live", "collie-launch-unlocked"});
  ::close(held);
}

TEST_CASE("launch --tee also writes each rank's output to a log file", "[launch]") {
  const collie::test::ScratchDir dir;
  const auto r = launch({"-n", "2", "--tee", "--log-dir", dir.path().string()},
                        "echo line-$RANK; echo problem-$RANK >&2");
  CHECK(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank) {
    std::ifstream log(dir.path() / "attempt-0" / ("rank-" + std::to_string(rank) + ".log"));
    const std::string text{std::istreambuf_iterator<char>(log), {}};
    CHECK_THAT(text, ContainsSubstring("line-" + std::to_string(rank) + "\n") &&
                         ContainsSubstring("problem-" + std::to_string(rank) + "\n"));
  }
}

TEST_CASE(
    "launch gives its job a secret: in the ranks' environment, on no command line, "
    "and the store refuses whoever lacks it",
    "[launch][security]") {
  const collie::test::ScratchDir dir;
  // Each rank: the secret's length; whether any process's command line holds
  // it (grep reads it from a file, so its own command line does not); the
  // store without the secret, then with it.
  const std::string script =
      "printf %s \"$COLLIE_STORE_TOKEN\" > " + dir.file("token") + ".$RANK; " +
      "echo length ${#COLLIE_STORE_TOKEN}; "
      "echo cmdlines $(cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -cF -f " +
      dir.file("token") + ".$RANK); " + "COLLIE_STORE_TOKEN= " + kCollie +
      " store set k$RANK v >/dev/null 2>&1; echo without $?; " + kCollie +
      " store set k$RANK v >/dev/null 2>&1; echo with $?";
  const auto r = launch({"-n", "2"}, script);
  REQUIRE(r.exit_code == 0);
  INFO(r.out << r.err);
  for (int rank = 0; rank < 2; ++rank) {
    const std::string p = "[rank " + std::to_string(rank) + "] ";
    CHECK_THAT(r.out, ContainsSubstring(p + "length 64\n") && ContainsSubstring(p + "cmdlines 0\n") &&
                          ContainsSubstring(p + "with 0\n") && !ContainsSubstring(p + "without 0\n"));
  }
  // Both ranks have the same secret, and another launch another one.
  std::ifstream a(dir.file("token") + ".0"), b(dir.file("token") + ".1");
  const std::string t0{std::istreambuf_iterator<char>(a), {}};
  const std::string t1{std::istreambuf_iterator<char>(b), {}};
  CHECK(t0.size() == 64);
  CHECK(t0 == t1);
  const auto again = launch({"-n", "1"}, "echo $COLLIE_STORE_TOKEN");
  REQUIRE(again.exit_code == 0);
  CHECK_THAT(again.out, !ContainsSubstring(t0));
  // A secret given to the launcher is the job's.
  std::ofstream(dir.file("given")) << "my-secret\n";
  const auto given =
      launch({"-n", "1", "--token-file", dir.file("given")}, "echo $COLLIE_STORE_TOKEN");
  CHECK_THAT(given.out, ContainsSubstring("[rank 0] my-secret\n"));
}

TEST_CASE("launch explains what it cannot do", "[launch]") {
  auto r = run({kCollie, "launch", "-n", "2", "--", "/no/such/program"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("cannot run '/no/such/program'"));
  r = run({kCollie, "launch", "-n", "0", "--", "/bin/true"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("at least 1"));
  r = run({kCollie, "launch", "--nnodes", "2", "--node-rank", "2", "--", "/bin/true"});
  CHECK_THAT(r.err, ContainsSubstring("--node-rank 2 is not in [0, 2)"));
  r = run({kCollie, "launch", "--nnodes", "2", "--node-rank", "1", "--master-port", "0", "--",
           "/bin/true"});
  CHECK_THAT(r.err, ContainsSubstring("need the store's port"));
  // Several nodes without a shared secret: refused, saying how to make one.
  r = run({kCollie, "launch", "--nnodes", "2", "--node-rank", "0", "--master-port", "0", "--",
           "/bin/true"},
          {"COLLIE_STORE_TOKEN=", "COLLIE_STORE_TOKEN_FILE="});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("needs a secret that every node shares") &&
                        ContainsSubstring("--token-file") && ContainsSubstring("--insecure"));
  r = run({kCollie, "launch", "--help"});
  CHECK_THAT(r.out, ContainsSubstring("--nproc-per-node") && ContainsSubstring("--max-restarts") &&
                        ContainsSubstring("LOCAL_RANK"));
}

namespace {

// Each rank's processors (/proc/self/status's Cpus_allowed_list, as the
// kernel writes it: "3", "0-1", "0,2"), by rank.
std::vector<std::string> cpus_by_rank(const RunResult& r, int ranks) {
  std::vector<std::string> by_rank(static_cast<std::size_t>(ranks));
  for (const auto& line : lines_of(r.out)) {
    int rank = -1;
    char list[256] = {};
    if (std::sscanf(line.c_str(), "[rank %d] Cpus_allowed_list: %255s", &rank, list) == 2 &&
        rank >= 0 && rank < ranks)
      by_rank[static_cast<std::size_t>(rank)] = list;
  }
  return by_rank;
}

std::string list_of(int a, int b) {
  return b == a + 1 ? fmt::format("{}-{}", a, b) : fmt::format("{},{}", a, b);
}

const std::string kShowCpus = "grep Cpus_allowed_list /proc/self/status";

}  // namespace

TEST_CASE("launch --bind: packed gives each rank one processor, consecutive ranks together",
          "[launch]") {
  const auto cpus = collie::allowed_cpus();
  REQUIRE(!cpus.empty());
  const int m = static_cast<int>(cpus.size());
  SECTION("packed, 3 ranks, told how many processors they share") {
    const auto r = launch({"-n", "3", "--bind", "packed"},
                          kShowCpus + "; echo \"shared: ${COLLIE_HOST_CPUS-unset}\"");
    REQUIRE(r.exit_code == 0);
    const auto got = cpus_by_rank(r, 3);
    for (int rank = 0; rank < 3; ++rank) {
      INFO("rank " << rank << " of 3 on " << m << " processors");
      CHECK(got[static_cast<std::size_t>(rank)] ==
            std::to_string(cpus[static_cast<std::size_t>(rank * m / 3)]));
      // Each rank alone may run on one: the cost model and shared memory
      // count the processors the three share (<collie/host_cpus.hpp>).
      CHECK_THAT(r.out, ContainsSubstring(fmt::format("[rank {}] shared: {}", rank, std::min(3, m))));
    }
  }
  SECTION("none: every rank keeps the launcher's processors") {
    const auto r = launch({"-n", "3", "--bind", "none"},
                          kShowCpus + "; echo \"shared: ${COLLIE_HOST_CPUS-unset}\"");
    CHECK_THAT(r.out, ContainsSubstring("[rank 0] shared: unset"));
    REQUIRE(r.exit_code == 0);
    std::ifstream status("/proc/self/status");
    std::string own;
    for (std::string line; std::getline(status, line);)
      if (line.rfind("Cpus_allowed_list:", 0) == 0)
        own = line.substr(line.find_first_not_of(" \t", 18));
    for (const auto& got : cpus_by_rank(r, 3))
      CHECK(got == own);
  }
  SECTION("auto: a processor each where they fit, packed past them") {
    std::string taskset;
    for (const char* path : {"/usr/bin/taskset", "/bin/taskset"})
      if (taskset.empty() && ::access(path, X_OK) == 0) taskset = path;
    if (m < 2 || taskset.empty()) {
      WARN("skipped: needs 2 processors and taskset (util-linux) to give the launcher two");
      return;
    }
    const auto two = fmt::format("{},{}", cpus[0], cpus[1]);
    auto on_two = [&](int n) {
      return run({taskset, "-c", two, kCollie, "launch", "-n", std::to_string(n), "--", "/bin/sh",
                  "-c", kShowCpus + "; echo \"shared: ${COLLIE_HOST_CPUS-unset}\""},
                 {}, {}, 60s);
    };
    auto r = on_two(1);
    REQUIRE(r.exit_code == 0);
    CHECK(cpus_by_rank(r, 1)[0] == list_of(cpus[0], cpus[1]));
    CHECK_THAT(r.out, ContainsSubstring("[rank 0] shared: unset"));
    r = on_two(2);
    REQUIRE(r.exit_code == 0);
    auto got = cpus_by_rank(r, 2);
    CHECK(got[0] == std::to_string(cpus[0]));
    CHECK(got[1] == std::to_string(cpus[1]));
    CHECK_THAT(r.out, ContainsSubstring("[rank 1] shared: 2"));
    r = on_two(3);
    REQUIRE(r.exit_code == 0);
    got = cpus_by_rank(r, 3);
    CHECK(got[0] == std::to_string(cpus[0]));
    CHECK(got[1] == std::to_string(cpus[0]));
    CHECK(got[2] == std::to_string(cpus[1]));
  }
  SECTION("a placement it does not know is refused before anything starts") {
    const auto r = launch({"-n", "2", "--bind", "spread"}, "echo started");
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, ContainsSubstring("--bind") && ContainsSubstring("auto,none,packed"));
    CHECK_THAT(r.out, !ContainsSubstring("started"));
  }
}

TEST_CASE("two nodes on one machine form one job and share its failures", "[launch][nodes]") {
  const collie::test::ScratchDir dir;
  const auto port_file = dir.file("port");
  const auto token_file = dir.file("job.token");
  std::ofstream(token_file) << "shared by both nodes\n";
  auto node = [&](int node_rank, const std::string& port, const std::string& script,
                  const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {kCollie,
                                     "launch",
                                     "-n",
                                     "2",
                                     "--nnodes",
                                     "2",
                                     "--node-rank",
                                     std::to_string(node_rank),
                                     "--master-addr",
                                     "127.0.0.1",
                                     "--master-port",
                                     port,
                                     "--port-file",
                                     port_file};
    if (std::find(extra.begin(), extra.end(), "--insecure") == extra.end())
      argv.insert(argv.end(), {"--token-file", token_file});
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"--", "/bin/sh", "-c", script});
    return std::make_unique<Subprocess>(argv);
  };
  auto wait_port = [&] {
    collie::test::eventually([&] { return std::filesystem::exists(port_file); }, 30s);
    std::ifstream in(port_file);
    std::string port;
    in >> port;
    return port;
  };

  // Both nodes run `script`, with `extra` options, to the end; both succeed.
  auto both = [&](const std::string& script, const std::vector<std::string>& extra = {}) {
    auto node0 = node(0, "0", script, extra);
    const auto port = wait_port();
    REQUIRE_FALSE(port.empty());
    auto node1 = node(1, port, script, extra);
    auto r1 = node1->wait(60s);
    auto r0 = node0->wait(60s);
    REQUIRE(r0);
    REQUIRE(r1);
    CHECK(r0->exit_code == 0);
    CHECK(r1->exit_code == 0);
    return std::make_pair(*r0, *r1);
  };
  SECTION("success on both") {
    const auto [r0, r1] = both("echo rank $RANK of $WORLD_SIZE on node $GROUP_RANK");
    CHECK_THAT(r0.out, ContainsSubstring("[rank 1] rank 1 of 4 on node 0"));
    CHECK_THAT(r1.out, ContainsSubstring("[rank 3] rank 3 of 4 on node 1"));
  }
  SECTION("--insecure runs without a secret, and says so") {
    const auto [r0, r1] = both("echo rank $RANK token [$COLLIE_STORE_TOKEN]", {"--insecure"});
    CHECK_THAT(r0.err, ContainsSubstring("WARNING: --insecure: this job has no secret"));
    CHECK_THAT(r1.out, ContainsSubstring("[rank 3] rank 3 token []"));
  }
  SECTION("a failure on node 1 stops node 0 too") {
    auto node0 = node(0, "0", "sleep 60");
    const auto port = wait_port();
    REQUIRE_FALSE(port.empty());
    auto node1 = node(1, port, "if [ $RANK = 3 ]; then exit 7; fi; sleep 60");
    auto r1 = node1->wait(60s);
    auto r0 = node0->wait(60s);
    REQUIRE(r0);
    REQUIRE(r1);
    CHECK(r1->exit_code == 7);
    CHECK(r0->exit_code == 1);
    CHECK_THAT(r0->err, ContainsSubstring("another node failed: rank 3 (node 1"));
  }
  SECTION("a launcher that dies without a word is noticed through its heartbeat") {
    auto node0 = node(0, "0", "sleep 60", {"--node-timeout", "3"});
    const auto port = wait_port();
    REQUIRE_FALSE(port.empty());
    auto node1 = node(1, port, "echo ready; sleep 5", {"--node-timeout", "3"});
    REQUIRE(node1->read_line(30s));
    // Node 1 has beaten its heartbeat twice (it has joined): then it dies
    // without a word.
    collie::store::ClientOptions options;
    options.token = collie::store::read_token_file(token_file);
    collie::store::StoreClient store("127.0.0.1", static_cast<std::uint16_t>(std::stoi(port)),
                                     options);
    REQUIRE(collie::test::eventually([&] {
      const auto beats = store.try_get(collie::keys::launch_heartbeat(1));
      return beats && std::stoll(*beats) >= 2;
    }, 30s));
    node1->signal(SIGKILL);
    const auto start = std::chrono::steady_clock::now();
    auto r0 = node0->wait(60s);
    REQUIRE(r0);
    CHECK(std::chrono::steady_clock::now() - start < 20s);
    CHECK(r0->exit_code == 1);
    CHECK_THAT(r0->err,
               ContainsSubstring("node 1 stopped answering") && ContainsSubstring("--node-timeout 3"));
  }
  SECTION("a node that never joins fails the job at the join timeout, not at the node timeout") {
    // (The join timeout counts from the attempt's start; a node that joins
    // late but in time is then held to the shorter heartbeat timeout.)
    const auto start = std::chrono::steady_clock::now();
    auto node0 = node(0, "0", "sleep 60", {"--join-timeout", "3", "--node-timeout", "1"});
    auto r0 = node0->wait(60s);
    REQUIRE(r0);
    CHECK(std::chrono::steady_clock::now() - start >= 3s);
    CHECK(r0->exit_code == 1);
    CHECK_THAT(r0->err,
               ContainsSubstring("node 1 never joined") && ContainsSubstring("--join-timeout 3"));
  }
}

TEST_CASE(
    "rank 0 hosting the store beyond loopback without a secret warns, and on loopback "
    "does not",
    "[launch][security]") {
  const std::string outside = collie::test::non_loopback_ipv4();
  if (outside.empty()) {
    WARN("skipped: this host has no non-loopback IPv4 address");
    return;
  }
  const std::string example = std::string(collie::test::paths::kExamples) + "/all_reduce";
  auto one_rank = [&](const std::string& master_addr) {
    // (Rank 0 must be told its port before it listens: one that was free a
    // moment ago, tried again if a test running beside this one took it.)
    for (int attempt = 0;; ++attempt) {
      const auto port = collie::test::momentarily_free_port();
      auto r = run({example}, {"RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=" + master_addr,
                               "MASTER_PORT=" + std::to_string(port), "COLLIE_STORE_TOKEN=",
                               "COLLIE_STORE_TOKEN_FILE=", "COLLIE_STORE_HOSTED="});
      if (attempt == 4 || r.err.find("Address already in use") == std::string::npos) return r;
    }
  };
  const auto wide = one_rank(outside);
  INFO(wide.out << wide.err);
  CHECK(wide.exit_code == 0);
  CHECK_THAT(wide.err, ContainsSubstring("hosts the job's store on every interface") &&
                           ContainsSubstring("without a secret") &&
                           ContainsSubstring("COLLIE_STORE_TOKEN"));
  const auto local = one_rank("127.0.0.1");
  CHECK(local.exit_code == 0);
  CHECK_THAT(local.err, !ContainsSubstring("without a secret"));
}
