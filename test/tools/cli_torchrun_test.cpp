// `collie launch` given torchrun's command line: its spellings, PET_
// variables, the program after the options, Python scripts and modules,
// torchrun's environment, its output specs, error files, the c10d
// rendezvous, and the flags collie cannot honour. The ranks are /bin/sh or
// small Python programs.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <sys/stat.h>

#include "support/build_paths.hpp"
#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/host_cpus.hpp>

#include "support/cli.hpp"
#include "support/eventually.hpp"
#include "support/read_file.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::kCollie;
using collie::test::read_file;
using collie::test::run;
using collie::test::RunResult;
using collie::test::ScratchDir;

namespace {

RunResult launch(const std::vector<std::string>& words, const std::vector<std::string>& env = {},
                 std::chrono::milliseconds timeout = 120s) {
  std::vector<std::string> argv{kCollie, "launch"};
  argv.insert(argv.end(), words.begin(), words.end());
  return run(argv, env, {}, timeout);
}

// Rank r's lines, without the "[rank r] " prefix, in order.
std::vector<std::string> lines_of_rank(const std::string& text, int rank) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  const std::string prefix = fmt::format("[rank {}] ", rank);
  for (std::string line; std::getline(in, line);)
    if (line.starts_with(prefix)) lines.push_back(line.substr(prefix.size()));
  return lines;
}


void write_executable(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), 0755);
}

// The Python that has torch here, or "" (the tests that need it skip).
bool has_torch(const std::string& python) {
  return run({"/bin/sh", "-c",
              python + " -c 'import importlib.util, sys; "
                       "sys.exit(0 if importlib.util.find_spec(\"torch\") else 1)'"})
             .exit_code == 0;
}

}  // namespace

TEST_CASE("torchrun's spelling: underscores, =values, and the program's own options after it",
          "[launch][torchrun]") {
  // No "--": everything after the program is the program's, -n and --nnodes too.
  const auto r = launch({"--nproc_per_node=2", "--max_restarts", "0", "/bin/sh", "-c",
                         "echo $RANK/$WORLD_SIZE \"$0\" \"$1\"", "-n", "--nnodes"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (int rank = 0; rank < 2; ++rank)
    CHECK(lines_of_rank(r.out, rank) ==
          std::vector<std::string>{fmt::format("{}/2 -n --nnodes", rank)});
  // Dashes, and collie's own "--", still work.
  const auto dashes = launch({"--nproc-per-node", "3", "--", "/bin/sh", "-c", "echo $WORLD_SIZE"});
  CHECK(lines_of_rank(dashes.out, 2) == std::vector<std::string>{"3"});
  // One rank per processor.
  const auto cpus = launch({"--nproc_per_node=cpu", "/bin/sh", "-c", "echo $LOCAL_WORLD_SIZE"});
  CHECK(lines_of_rank(cpus.out, 0) ==
        std::vector<std::string>{std::to_string(collie::host_cpus())});
}

TEST_CASE("torchrun's PET_ variables stand for the flags the command line does not give",
          "[launch][torchrun]") {
  const std::string show = "echo $WORLD_SIZE $ROLE_NAME $TORCHELASTIC_RUN_ID";
  auto r = launch({"/bin/sh", "-c", show},
                  {"PET_NPROC_PER_NODE=3", "PET_ROLE=trainer", "PET_RDZV_ID=job7"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(lines_of_rank(r.out, 2) == std::vector<std::string>{"3 trainer job7"});
  // The command line wins.
  r = launch({"--nproc_per_node", "2", "/bin/sh", "-c", show}, {"PET_NPROC_PER_NODE=3"});
  CHECK(lines_of_rank(r.out, 1) == std::vector<std::string>{"2 default none"});
  CHECK(lines_of_rank(r.out, 2).empty());
  // A flag: PET_NO_PYTHON=1 runs a .py program as it is.
  ScratchDir dir;
  write_executable(dir.file("tool.py"), "#!/bin/sh\necho not python\n");
  r = launch({dir.file("tool.py")}, {"PET_NO_PYTHON=1"});
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"not python"});
}

TEST_CASE("every rank gets torchrun's whole environment", "[launch][torchrun]") {
  const std::string show =
      "echo $ROLE_NAME $ROLE_RANK $ROLE_WORLD_SIZE $TORCHELASTIC_RUN_ID "
      "$TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RESTART_COUNT ${OMP_NUM_THREADS:-unset}; "
      "echo $TORCHELASTIC_ERROR_FILE";
  auto r = launch({"--nproc_per_node=3", "--role", "worker", "--rdzv_id", "run42",
                   "--max_restarts=2", "/bin/sh", "-c", show},
                  {"OMP_NUM_THREADS="});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::set<std::string> error_files;
  for (int rank = 0; rank < 3; ++rank) {
    const auto lines = lines_of_rank(r.out, rank);
    REQUIRE(lines.size() == 2);
    CHECK(lines[0] == fmt::format("worker {} 3 run42 2 0 1", rank));
    CHECK_THAT(lines[1], EndsWith("error.json"));
    error_files.insert(lines[1]);
  }
  CHECK(error_files.size() == 3);
  // Said once, as torchrun says it.
  CHECK_THAT(r.err, ContainsSubstring("OMP_NUM_THREADS=1"));
  // A number the user set stays, and nothing is said.
  r = launch({"--nproc_per_node=2", "/bin/sh", "-c", "echo $OMP_NUM_THREADS"},
             {"OMP_NUM_THREADS=4"});
  CHECK(lines_of_rank(r.out, 1) == std::vector<std::string>{"4"});
  CHECK_THAT(r.err, !ContainsSubstring("OMP_NUM_THREADS"));
}

TEST_CASE("a .py script or -m module runs with a Python that has torch", "[launch][torchrun]") {
  if (!has_torch("/usr/bin/python3")) {
    WARN("skipped: /usr/bin/python3 has no torch (python3-torch)");
    return;
  }
  ScratchDir dir;
  // A python3 on PATH without torch comes first, as a virtualenv's might.
  std::filesystem::create_directories(dir.file("bin"));
  write_executable(dir.file("bin/python3"),
                   "#!/bin/sh\n"
                   "case \"$*\" in *find_spec*) exit 3;; esac\n"
                   "echo the python without torch\n");
  std::ofstream(dir.file("main.py")) << "import os, sys, torch\n"
                                        "print(os.environ['RANK'], sys.executable, sys.argv[1:])\n";
  const std::string path = "PATH=" + dir.file("bin") + ":/usr/bin:/bin";
  auto r = launch({"--nproc_per_node=2", dir.file("main.py"), "--lr", "0.1"}, {path});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(lines_of_rank(r.out, 1) ==
        std::vector<std::string>{"1 /usr/bin/python3 ['--lr', '0.1']"});
  // A module, found on PYTHONPATH.
  std::ofstream(dir.file("mymod.py")) << "import os\nprint('module', os.environ['LOCAL_RANK'])\n";
  r = launch({"-m", "mymod"}, {path, "PYTHONPATH=" + dir.path().string()});
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"module 0"});
  // --run_path: a script whatever its name.
  std::ofstream(dir.file("script")) << "print('by path')\n";
  r = launch({"--run_path", dir.file("script")}, {path});
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"by path"});
  // PYTHON_EXEC chooses, as under torchrun.
  r = launch({dir.file("main.py")}, {path, "PYTHON_EXEC=" + dir.file("bin/python3")});
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"the python without torch"});
}

TEST_CASE("torchrun's output flags: -t/--tee, -r/--redirects and --local_ranks_filter",
          "[launch][torchrun]") {
  ScratchDir dir;
  const std::string both = "echo out $RANK; echo err $RANK >&2";
  // -t 1: stdout also to the log; both streams on the console.
  auto r = launch({"--nproc_per_node=2", "-t", "1", "--log_dir", dir.file("a"), "/bin/sh", "-c",
                   both});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(read_file(dir.file("a/attempt-0/rank-1.log")) == "out 1\n");
  CHECK(lines_of_rank(r.err, 1) == std::vector<std::string>{"err 1"});
  // -r 2: stderr to the log only.
  r = launch({"--nproc_per_node=2", "--redirects=2", "--log_dir", dir.file("b"), "/bin/sh", "-c",
              both});
  CHECK(read_file(dir.file("b/attempt-0/rank-0.log")) == "err 0\n");
  CHECK(lines_of_rank(r.err, 0).empty());
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"out 0"});
  // Per local rank: rank 1's stdout to its log only; rank 0 untouched.
  r = launch({"--nproc_per_node=2", "-r", "1:1", "--log_dir", dir.file("c"), "/bin/sh", "-c",
              both});
  CHECK(lines_of_rank(r.out, 1).empty());
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"out 0"});
  CHECK(read_file(dir.file("c/attempt-0/rank-1.log")) == "out 1\n");
  CHECK_FALSE(std::filesystem::exists(dir.file("c/attempt-0/rank-0.log")));
  // Only rank 1 on the console.
  r = launch({"--nproc_per_node=3", "--local_ranks_filter=1", "/bin/sh", "-c", both});
  CHECK(lines_of_rank(r.out, 0).empty());
  CHECK(lines_of_rank(r.out, 2).empty());
  CHECK(lines_of_rank(r.out, 1) == std::vector<std::string>{"out 1"});
  // collie's bare --tee is both streams, its program after "--".
  r = launch({"--tee", "--log-dir", dir.file("d"), "--", "/bin/sh", "-c", both});
  CHECK(read_file(dir.file("d/attempt-0/rank-0.log")) == "out 0\nerr 0\n");
}

TEST_CASE("a rank's error file (torch's @record) is quoted in the failure summary",
          "[launch][torchrun]") {
  // What torch's @record writes, from a rank that then fails.
  const std::string record =
      "if [ $RANK = 1 ]; then printf '%s' '{\"message\": {\"message\": \"ValueError: bad "
      "batch 7\", \"extraInfo\": {\"py_callstack\": \"Traceback (most recent call last):\\n  "
      "File \\\"main.py\\\", line 3, in <module>\\nValueError: bad batch 7\\n\", "
      "\"timestamp\": \"1795662083\"}}}' > $TORCHELASTIC_ERROR_FILE; exit 1; fi; sleep 30";
  const auto r = launch({"--nproc_per_node=3", "/bin/sh", "-c", record});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring("rank 1 raised ValueError: bad batch 7 (its error file"));
  CHECK_THAT(r.err, ContainsSubstring("  File \"main.py\", line 3, in <module>"));
  // Without one, nothing is quoted.
  const auto plain = launch({"--nproc_per_node=2", "/bin/sh", "-c", "exit $RANK"});
  CHECK(plain.exit_code == 1);
  CHECK_THAT(plain.err, !ContainsSubstring("raised"));
}

TEST_CASE("c10d: the node that has the endpoint hosts the store, the next to join is node 1",
          "[launch][torchrun]") {
  ScratchDir dir;
  const std::vector<std::string> env{"COLLIE_STORE_TOKEN=shared-secret"};
  // Node 0 on a free port of this host; node 1 names the same endpoint: its
  // port is taken here, so it joins.
  collie::test::Subprocess first(
      {kCollie, "launch", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
       "--rdzv_endpoint=127.0.0.1:0", "--port-file", dir.file("port"), "--", "/bin/sh", "-c",
       "echo $RANK $GROUP_RANK $WORLD_SIZE"},
      env);
  REQUIRE(collie::test::eventually(
      [&] { return std::filesystem::exists(dir.file("port")); }, 60s));
  const auto port = read_file(dir.file("port"));
  const auto second = launch({"--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d",
                              "--rdzv_endpoint=127.0.0.1:" + port.substr(0, port.find('\n')),
                              "/bin/sh", "-c", "echo $RANK $GROUP_RANK $WORLD_SIZE"},
                             env);
  const auto r1 = first.wait(120s);
  REQUIRE(r1);
  INFO(r1->out << r1->err << second.out << second.err);
  CHECK(r1->exit_code == 0);
  CHECK(second.exit_code == 0);
  CHECK(lines_of_rank(r1->out, 0) == std::vector<std::string>{"0 0 2"});
  CHECK(lines_of_rank(second.out, 1) == std::vector<std::string>{"1 1 2"});
  CHECK_THAT(second.err, ContainsSubstring("joined as node 1"));
}

TEST_CASE("an elastic job ignores --node_rank, saying so, as torchrun does", "[launch][torchrun]") {
  // Scripts pass --node_rank=$NODE_RANK to every launch, elastic or not.
  const auto r = launch({"--nnodes=1:2", "--nproc_per_node=1", "--node_rank=1",
                         "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:0",
                         "--rdzv_conf=last_call_timeout=1", "/bin/sh", "-c",
                         "echo $RANK $GROUP_RANK $WORLD_SIZE"},
                        {"COLLIE_STORE_TOKEN=shared-secret"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 0);
  CHECK(lines_of_rank(r.out, 0) == std::vector<std::string>{"0 0 1"});
  CHECK_THAT(r.err, ContainsSubstring("--node-rank 1 is ignored: an elastic job (--nnodes 1:2)"));
}

TEST_CASE("torchrun's flags that collie cannot honour are errors that name them",
          "[launch][torchrun]") {
  const auto refused = [](std::vector<std::string> words, const std::string& says) {
    words.insert(words.end(), {"/bin/true"});
    const auto r = launch(words);
    INFO(r.err);
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.err, ContainsSubstring(says));
  };
  refused({"--rdzv_backend=zookeeper"}, "--rdzv-backend zookeeper");
  refused({"--rdzv_conf", "read_timeout=60"}, "--rdzv-conf read_timeout");
  refused({"--nnodes=1:3"}, "elastic");
  refused({"--nnodes=3:1"}, "MIN <= MAX");
  refused({"--nproc_per_node=0"}, "at least 1");
  refused({"--nproc_per_node=many"}, "auto, cpu or gpu");
  refused({"--tee=7"}, "not a stream spec");
  refused({"-r", "5:1"}, "names local rank 5");
  refused({"--local_ranks_filter=3"}, "each must be a local rank");
  refused({"--standalone", "--nnodes=2"}, "--standalone");
  refused({"--no_python", "-m"}, "--no-python cannot go with --module");
  refused({"--local_addr=203.0.113.77"}, "--local-addr 203.0.113.77");
  refused({"--start_method=thread"}, "spawn, fork and forkserver");
  refused({"--bogus_flag"}, "--bogus_flag");
  if (collie::test::run({kCollie, "--version"}).out.find("not usable") != std::string::npos)
    refused({"--nproc_per_node=gpu"}, "no CUDA device");
  // Taken, and said to be unneeded.
  const auto r = launch({"--start_method=spawn", "--monitor_interval=0.5", "/bin/true"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.err, ContainsSubstring("--start-method spawn is not needed"));
}

TEST_CASE("a torch group under collie launch names a stopped rank within the stall time",
          "[launch][torchrun]") {
  if (!COLLIE_TORCH_BACKEND_BUILT || !has_torch("/usr/bin/python3")) {
    WARN("skipped: no collie_torch backend in this build, or /usr/bin/python3 has no torch");
    return;
  }
  // Rank 2 stops itself before an all_reduce; the stall time is 2 s, the
  // group's timeout 12 s.
  const auto r = launch({"--nproc_per_node=3", std::string(collie::test::paths::kSource) + "/test/torch/stopped_rank.py"},
                        {"COLLIE_STALL_TIME=2", "COLLIE_LOG_LEVEL=warn"}, 180s);
  INFO(r.out << r.err);
  CHECK(r.exit_code == 3);
  for (int rank : {0, 1}) {
    // Its log, within the stall time...
    const auto lines = lines_of_rank(r.err, rank);
    const auto first = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find("stalled: all_reduce") != std::string::npos;
    });
    REQUIRE(first != lines.end());
    CHECK_THAT(*first, ContainsSubstring("rank 2 at") && ContainsSubstring("is stopped (SIGSTOP"));
    const auto at = first->find("has waited ");
    REQUIRE(at != std::string::npos);
    CHECK(std::stod(first->substr(at + 11)) <= 2.5);
    // ... and what it raised.
    const auto out = lines_of_rank(r.out, rank);
    REQUIRE(!out.empty());
    CHECK_THAT(out.back(), ContainsSubstring("the stall inspector found") &&
                               ContainsSubstring("rank 2 at") && ContainsSubstring("is stopped"));
  }
  // The launcher's summary reads the torch group's blames (under torch's
  // prefixes) and names rank 2.
  CHECK_THAT(r.err, ContainsSubstring("rank 2 (node 0) is the one the others blame"));
}

