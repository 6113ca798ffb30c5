// Master-worker mode as processes under `collie launch`: the parameter
// server example converges, a worker SIGKILLed mid-run fails exactly what
// depended on it (within a second, naming it) while the master goes on, a
// master that dies takes the job down blaming rank 0, and a flood of
// operations never waited on keeps the master's memory bounded.
#include <regex>
#include <tuple>

#include "support/build_paths.hpp"
#include "support/catch.hpp"

#include "support/cli.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::collie_cli;
using collie::test::RunResult;

namespace {

const std::string kProgram = collie::test::paths::kMwProgram;
const std::string kExamples = collie::test::paths::kExamples;

RunResult launch(int ranks, const std::vector<std::string>& program, bool master_worker = true,
                 const std::vector<std::string>& env = {}) {
  std::vector<std::string> args;
  if (master_worker) args.push_back("--master-worker");
  args.insert(args.end(), {"-n", std::to_string(ranks), "--"});
  args.insert(args.end(), program.begin(), program.end());
  return collie_cli("launch", args, env, 180s);
}

}  // namespace

TEST_CASE("master-worker: the parameter server converges to one process's answer",
          "[master_worker][launch]") {
  for (int ranks : {2, 4}) {
    const auto r = launch(ranks, {kExamples + "/parameter_server"}, false);
    INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
    REQUIRE(r.exit_code == 0);
    CHECK_THAT(r.out, ContainsSubstring("[rank 0] step 500: loss") &&
                          ContainsSubstring("[rank 0] w = 3.0000, b = 2.0001") &&
                          ContainsSubstring(fmt::format("on {} workers", ranks - 1)) &&
                          ContainsSubstring("): same\n"));
  }
}

TEST_CASE("master-worker: a worker SIGKILLed mid-run fails what depended on it within a second "
          "and the master goes on",
          "[master_worker][launch]") {
  const auto r = launch(4, {kProgram, "kill"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  // The spinning call, the scale behind it and the copy into worker 2.
  const std::regex depends(R"(depends on worker 2: (.*) after (\d+) ms: failed: (.*))");
  int failed = 0;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), depends), end; it != end; ++it) {
    ++failed;
    INFO((*it)[0].str());
    CHECK(std::stoi((*it)[2].str()) < 1000);
    CHECK_THAT((*it)[3].str(), ContainsSubstring("worker 2 (rank 2") && ContainsSubstring("died"));
  }
  CHECK(failed == 3);
  CHECK_THAT(r.out, ContainsSubstring("[rank 0] worker 1: ok\n") &&
                        ContainsSubstring("[rank 0] worker 3: ok\n") &&
                        ContainsSubstring("a dead worker's buffer: ConnectionError") &&
                        ContainsSubstring("alloc on a dead worker: ConnectionError") &&
                        ContainsSubstring("all_reduce with a dead worker: ConnectionError") &&
                        ContainsSubstring("after: worker 1 -> worker 3 right"));
  CHECK_THAT(r.err, ContainsSubstring("rank 2 (a worker") && ContainsSubstring("SIGKILL") &&
                        ContainsSubstring("the master carries on"));
}

TEST_CASE("master-worker: a master that dies ends the job, blaming rank 0",
          "[master_worker][launch]") {
  for (const auto& [mode, signal, name] :
       {std::tuple{"master-dies", 9, "SIGKILL"}, std::tuple{"master-term", 15, "SIGTERM"}}) {
    const auto r = launch(3, {kProgram, mode});
    INFO(mode << "\nstdout:\n" << r.out << "\nstderr:\n" << r.err);
    CHECK(r.exit_code == 128 + signal);
    CHECK_THAT(r.out, ContainsSubstring("master: dying"));
    CHECK_THAT(r.err, ContainsSubstring("rank 0 (node 0") && ContainsSubstring("failed first") &&
                          ContainsSubstring(std::string("killed by ") + name));
  }
}

TEST_CASE("master-worker: a stopped worker is named, and goes on when continued",
          "[master_worker][launch]") {
  const auto r = launch(2, {kProgram, "stop"}, true, {"COLLIE_STALL_TIME=1"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, ContainsSubstring("stopped: TimeoutError: fill(float32[16]") &&
                        ContainsSubstring("worker 1 (rank 1") &&
                        ContainsSubstring("has finished nothing for") &&
                        ContainsSubstring("is stopped (SIGSTOP") &&
                        ContainsSubstring("continued: right"));
}

TEST_CASE("master-worker: a copy chain between workers moves no payload through the master",
          "[master_worker][launch][volume]") {
  // Over TCP every byte the master's process receives or sends passes its
  // sockets: 64 MiB through three hops would be 192 MiB there.
  const auto r = launch(4, {kProgram, "chain", "64"}, true, {"COLLIE_TRANSPORT=tcp"});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex(R"(chain: 64 MiB 1 -> 2 -> 3 -> 1 right; the master's process moved (\d+) bytes)")));
  CHECK(std::stol(m[1].str()) < (1 << 20));
}

TEST_CASE("master-worker: operations queued without waiting keep the master's memory bounded",
          "[master_worker][launch]") {
  // Each operation the master keeps costs a few hundred bytes: a million
  // unbounded would be hundreds of MiB. (Fewer under the sanitizers.)
  const long n = COLLIE_TEST_MEASURES_RSS ? 1000000 : 20000;
  const auto r = launch(2, {kProgram, "flood", std::to_string(n)});
  INFO("stdout:\n" << r.out << "\nstderr:\n" << r.err);
  REQUIRE(r.exit_code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(r.out, m, std::regex(R"(rss (\d+) KiB before, (\d+) KiB after)")));
  if (COLLIE_TEST_MEASURES_RSS) CHECK(std::stol(m[2].str()) - std::stol(m[1].str()) < 32 * 1024);
}
