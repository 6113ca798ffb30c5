// `collie bench <collective>|all`: stand-alone and under collie launch, the
// table, CSV and JSON, checking (a spoiled result fails the command), the
// plot with a baseline, errors, and Ctrl-C. Sizes are tiny: these test the
// command, not the speed (docs/PERFORMANCE.md has the figures).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <signal.h>
#include <sstream>

#include "support/catch.hpp"
#include <collie/host_cpus.hpp>
#include <fmt/format.h>

#include "support/cli.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::run;
using collie::test::RunResult;
using collie::test::Subprocess;

namespace {

using collie::test::kCollie;

RunResult bench(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return collie::test::collie_cli("bench", args, env, 120s);
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(text);
  while (std::getline(in, field, sep))
    out.push_back(field);
  return out;
}

// CSV rows as maps from the header's names.
std::vector<std::map<std::string, std::string>> csv_rows(const std::string& text) {
  const auto lines = split(text, '\n');
  REQUIRE(!lines.empty());
  const auto header = split(lines[0], ',');
  std::vector<std::map<std::string, std::string>> rows;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const auto f = split(lines[i], ',');
    REQUIRE(f.size() == header.size());
    std::map<std::string, std::string> row;
    for (std::size_t j = 0; j < f.size(); ++j)
      row[header[j]] = f[j];
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE(
    "bench all_reduce stand-alone: a row per size and placement, all checked, bus factor "
    "2(n-1)/n") {
  const auto r = bench({"all_reduce", "--ranks", "3", "-b", "4", "-e", "1K", "-f", "4", "-n", "2",
                        "-w", "1", "--csv"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto rows = csv_rows(r.out);
  // 4, 16, 64, 256, 1024 bytes, out-of-place and in-place.
  REQUIRE(rows.size() == 10);
  std::set<std::string> sizes;
  for (const auto& row : rows) {
    sizes.insert(row.at("size_bytes"));
    CHECK(row.at("ranks") == "3");
    CHECK(row.at("wrong") == "0");
    CHECK(row.at("algorithm") == "auto");
    CHECK(row.at("chosen") != "auto");
    const double time = std::stod(row.at("time_us"));
    const double algbw = std::stod(row.at("algbw_gbps"));
    const double busbw = std::stod(row.at("busbw_gbps"));
    CHECK(time > 0);
    // Rank 0's median of its two calls is their mean, at most the slowest
    // rank's mean (both printed to 3 decimals).
    const double median = std::stod(row.at("rank0_median_us"));
    CHECK(median > 0);
    CHECK(median <= time + 0.0015);
    CHECK(std::stoull(row.at("count")) * 4 == std::stoull(row.at("size_bytes")));
    // Printed to 3 decimals (time) and 6 (bandwidths): compare within that.
    CHECK(algbw == Approx(std::stod(row.at("size_bytes")) / time / 1e3).epsilon(1e-3).margin(2e-6));
    CHECK(busbw == Approx(algbw * 4.0 / 3.0).epsilon(1e-3).margin(2e-6));
  }
  CHECK(sizes == std::set<std::string>{"4", "16", "64", "256", "1024"});
}

TEST_CASE("bench all_reduce --algo auto under COLLIE_ALGO with sizes: each range its rule's, "
          "Auto in the gap") {
  const std::vector<std::string> args = {"all_reduce", "--ranks", "3", "-b", "4", "-e", "1K",
                                         "-f", "4", "-n", "1", "-w", "0", "--csv", "--algo",
                                         "auto"};
  const auto plain = bench(args);
  INFO(plain.out << plain.err);
  REQUIRE(plain.exit_code == 0);
  const auto r = bench(args, {"COLLIE_ALGO=all_reduce:tree:0-64,all_reduce:recursive_doubling:256-"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::map<std::string, std::string> auto_chose;
  for (const auto& row : csv_rows(plain.out)) auto_chose[row.at("size_bytes")] = row.at("chosen");
  const auto rows = csv_rows(r.out);
  REQUIRE(rows.size() == 10);
  for (const auto& row : rows) {
    const auto& size = row.at("size_bytes");
    INFO(size << " bytes");
    CHECK(row.at("wrong") == "0");
    CHECK(row.at("algorithm") == "auto");
    if (size == "4" || size == "16")
      CHECK(row.at("chosen") == "tree");  // 0-64: the first rule
    else if (size == "64")
      CHECK(row.at("chosen") == auto_chose.at(size));  // no rule: Auto's (the board's here)
    else
      CHECK(row.at("chosen") == "recursive_doubling");  // 256 and up: the second rule
  }
}

TEST_CASE("bench under a COLLIE_ALGO it cannot read: refused, naming the token") {
  const auto r = bench({"all_reduce", "--ranks", "2", "-b", "4", "-e", "4", "-n", "1"},
                       {"COLLIE_ALGO=all_reduce:ring:64K-1K"});
  INFO(r.out << r.err);
  CHECK(r.exit_code != 0);
  CHECK(r.err.find("COLLIE_ALGO: in 'all_reduce:ring:64K-1K', '64K-1K' is not a range of sizes") !=
        std::string::npos);
}

TEST_CASE("COLLIE_SEAL=off is said once on standard error, the default not at all, and a word "
          "it cannot read is refused by name") {
  const std::vector<std::string> args = {"all_reduce", "--ranks", "3", "-b", "8", "-e", "8",
                                         "-n", "1"};
  const std::string said = "COLLIE_SEAL=off: messages between hosts travel in the clear";
  const auto off = bench(args, {"COLLIE_SEAL=off"});
  INFO(off.out << off.err);
  CHECK(off.exit_code == 0);
  const auto first = off.err.find(said);
  CHECK(first != std::string::npos);
  CHECK(off.err.find(said, first + 1) == std::string::npos);  // once, not once a rank
  const auto plain = bench(args, {});
  CHECK(plain.exit_code == 0);
  CHECK(plain.err.find("COLLIE_SEAL") == std::string::npos);
  const auto wrong = bench(args, {"COLLIE_SEAL=maybe"});
  CHECK(wrong.exit_code != 0);
  CHECK_THAT(wrong.err, ContainsSubstring("COLLIE_SEAL") && ContainsSubstring("maybe"));
}

TEST_CASE("bench all: every collective and every algorithm, in the table, with a footer") {
  const auto r = bench({"all", "--ranks", "3", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-w",
                        "0", "--algo", "all", "-r", "2"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  for (const char* c : {"broadcast", "reduce", "all_reduce", "gather", "all_gather", "scatter",
                        "reduce_scatter", "all_to_all", "barrier"})
    CHECK(r.out.find(std::string("# ") + c + " (bus factor") != std::string::npos);
  for (const char* a : {"ring", "tree", "halving_doubling", "recursive_doubling", "linear",
                        "recursive_halving", "pairwise", "dissemination"})
    CHECK(r.out.find(a) != std::string::npos);
  CHECK(r.out.find("# Out of bounds values : 0 OK") != std::string::npos);
  CHECK(r.out.find("# Avg bus bandwidth") != std::string::npos);
  CHECK(r.out.find("3 ranks") != std::string::npos);
}

TEST_CASE("bench under collie launch uses the job's ranks, JSON names every cell") {
  const auto r = run({kCollie, "launch", "-n", "4",     "--", kCollie, "bench", "reduce_scatter",
                      "-b",    "16",     "-e", "256",   "-f", "16",    "-n",    "1",
                      "-w",    "0",      "-d", "int32", "-o", "max",   "--json"},
                     {}, {}, 120s);
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("\"ranks\": 4") != std::string::npos);
  CHECK(r.out.find("\"dtype\": \"int32\"") != std::string::npos);
  CHECK(r.out.find("\"op\": \"max\"") != std::string::npos);
  CHECK(r.out.find("\"size_bytes\": 16,") != std::string::npos);
  CHECK(r.out.find("\"size_bytes\": 256,") != std::string::npos);
  CHECK(r.out.find("\"wrong\": 0, \"avg_busbw_gbps\"") != std::string::npos);
  // Only rank 0 prints the document.
  CHECK(std::count(r.out.begin(), r.out.end(), '{') == 3);
}

TEST_CASE("bench --barrier-each times rooted collectives one iteration at a time") {
  const auto r = bench({"gather", "--ranks", "3", "-b", "12", "-e", "3K", "-f", "16", "-n", "3",
                        "-w", "1", "-r", "2", "--barrier-each"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("3 iterations after 1 warm-up, each after a barrier") != std::string::npos);
  CHECK(r.out.find("# Out of bounds values : 0 OK") != std::string::npos);
  const auto j = bench({"scatter", "--ranks", "2", "-b", "8", "-e", "8", "-n", "2", "-w", "0",
                        "--barrier-each", "--json"});
  INFO(j.out << j.err);
  REQUIRE(j.exit_code == 0);
  CHECK(j.out.find("\"barrier_each\": true") != std::string::npos);
  CHECK(j.out.find("each timed alone, after a barrier") != std::string::npos);
  CHECK(j.out.find("\"wrong\": 0") != std::string::npos);
}

TEST_CASE("bench --bind: the ranks it starts are placed as collie launch places them, and "
          "the header says where") {
  const auto cpus = collie::allowed_cpus();
  REQUIRE(!cpus.empty());
  const auto m = cpus.size();
  const auto expected =
      fmt::format("3 processes started by collie bench, bound packed to processors {} {} {})",
                  cpus[0], cpus[m / 3], cpus[2 * m / 3]);
  const auto r = bench({"all_reduce", "--ranks", "3", "--bind", "packed", "-b", "8", "-e", "1K",
                        "-f", "32", "-n", "3", "-w", "1"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find(expected) != std::string::npos);
  CHECK(r.out.find("# Out of bounds values : 0 OK") != std::string::npos);
  const auto none = bench({"all_reduce", "--ranks", "3", "--bind", "none", "-b", "8", "-e", "8",
                           "-n", "2", "-w", "0"});
  INFO(none.out << none.err);
  REQUIRE(none.exit_code == 0);
  CHECK(none.out.find("3 processes started by collie bench)") != std::string::npos);
}

TEST_CASE("bench: a wrong element is counted in #wrong and fails the command") {
  const auto r =
      bench({"all_gather", "--ranks", "2", "-b", "8", "-e", "32", "-n", "1", "-w", "0", "--csv"},
            {"COLLIE_BENCH_SPOIL_RANK=1"});
  INFO(r.out << r.err);
  CHECK(r.exit_code == 1);
  for (const auto& row : csv_rows(r.out))
    CHECK(row.at("wrong") == "1");
  CHECK(r.err.find("wrong result: rank 1: element 0") != std::string::npos);
  CHECK(r.err.find("3 wrong elements") != std::string::npos);
}

TEST_CASE("bench --plot draws the sizes and a baseline, bad baselines are named") {
  const collie::test::ScratchDir dir;
  const auto svg = dir.path() / "bw.svg";
  const auto base = dir.path() / "other.csv";
  {
    std::ofstream out(base);
    out << "size,busbw\n8,0.001\n1024,0.1\n";
  }
  const auto r =
      bench({"broadcast", "--ranks", "2", "-b", "8", "-e", "1K", "-f", "4", "-n", "1", "-w", "0",
             "--algo", "tree,ring", "--plot", svg.string(), "--baseline", "mpi=" + base.string()});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  std::ifstream in(svg);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(text.rfind("<svg", 0) == 0);
  CHECK(text.find("collie tree") != std::string::npos);
  CHECK(text.find("collie ring") != std::string::npos);
  CHECK(text.find(">mpi<") != std::string::npos);
  CHECK(text.find("stroke-dasharray") != std::string::npos);  // the baseline
  CHECK(text.find("bus bandwidth (GB/s, log scale)") != std::string::npos);
  CHECK(text.find("1 KiB") != std::string::npos);

  {
    std::ofstream out(base);
    out << "bytes;bw\n8;1\n";
  }
  const auto bad = bench({"broadcast", "--ranks", "1", "-b", "8", "-e", "8", "-n", "1", "--plot",
                          svg.string(), "--baseline", base.string()});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("line 1: expected nccl-tests' columns") != std::string::npos);
}

TEST_CASE("bench: impossible requests fail before any rank starts, listing what exists") {
  auto r = bench({"gather", "--algo", "ring"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("gather has no algorithm 'ring'; it has: auto, tree, linear") !=
        std::string::npos);
  r = bench({"all_reduce", "-d", "complex64"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("unknown dtype 'complex64'") != std::string::npos);
  CHECK(r.err.find("bfloat16") != std::string::npos);
  r = bench({"all_reduce", "-d", "float", "-o", "bxor"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("bxor") != std::string::npos);
  r = bench({"broadcast", "--ranks", "2", "-r", "2"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("root 2 is not a rank") != std::string::npos);
  r = bench({"all_reduce", "-b", "1M", "-e", "1K"});
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("-b 1048576 is larger than -e 1024") != std::string::npos);
}

TEST_CASE("bench --device cuda where no GPU is usable fails, in the words of collie --version",
          "[device]") {
  // The nocuda preset runs this too: CUDA not built in, or built in with no
  // driver or device, each says why in one sentence, the same everywhere.
  const auto version = run({kCollie, "--version"});
  REQUIRE(version.exit_code == 0);
  const auto lines = split(version.out, '\n');
  REQUIRE(lines.size() == 2);
  const std::string& status = lines[1];
  CHECK_THAT(status, StartsWith("CUDA "));
  if (status.find("not built in") == std::string::npos &&
      status.find("not usable") == std::string::npos) {
    WARN("skipped: a GPU is usable here (" << status << ")");
    return;
  }
  const auto r = bench({"all_reduce", "--ranks", "2", "-b", "8", "-e", "8", "-n", "1", "--device",
                        "cuda"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, ContainsSubstring(fmt::format("--device cuda: {}\n", status)));
  CHECK(r.out.empty());
}

TEST_CASE("bench world of one rank, and a count of one element per rank") {
  const auto r = bench({"all_to_all", "--ranks", "1", "-b", "1", "-e", "4", "-n", "1", "-w", "0",
                        "-d", "int8", "--csv"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto rows = csv_rows(r.out);
  REQUIRE(rows.size() == 3);  // 1, 2, 4 bytes
  CHECK(rows[0].at("size_bytes") == "1");
  CHECK(rows[0].at("busbw_gbps") == "0.000000");  // (n-1)/n = 0
}

TEST_CASE("bench: SIGINT stops after the row being measured and keeps the rows so far") {
  Subprocess p({kCollie, "bench", "all_reduce", "--ranks", "2", "-b", "8", "-e", "1G", "-f", "2",
                "-n", "50", "-w", "0", "-c", "0"});
  // Wait for the first row, then interrupt rank 0 only: the others learn
  // it at the end of the row.
  bool row = false;
  for (int i = 0; i < 40 && !row; ++i) {
    const auto line = p.read_line(5s);
    if (!line) break;
    row = !line->empty() && (*line)[0] != '#';
  }
  REQUIRE(row);
  p.signal(SIGINT);
  const auto r = p.wait(60s);
  REQUIRE(r);
  INFO(r->out << r->err);
  CHECK(r->exit_code == 130);
  CHECK(r->out.find("# Interrupted: the rows above are those measured so far") !=
        std::string::npos);
  CHECK(r->out.find("# Avg bus bandwidth") != std::string::npos);
  CHECK(r->out.find("1073741824") == std::string::npos);  // it did not reach 1 GiB
}

TEST_CASE(
    "bench stand-alone: a rank killed mid-sweep fails the command within seconds, naming it") {
  Subprocess p({kCollie, "bench", "all_reduce", "--ranks", "2", "-b", "8", "-e", "1G", "-n", "50",
                "-w", "0", "-c", "0"});
  bool row = false;
  for (int i = 0; i < 40 && !row; ++i) {
    const auto line = p.read_line(5s);
    if (!line) break;
    row = !line->empty() && (*line)[0] != '#';
  }
  REQUIRE(row);
  // Rank 1 is the bench's only child.
  std::ifstream children("/proc/" + std::to_string(p.pid()) + "/task/" + std::to_string(p.pid()) +
                         "/children");
  pid_t rank1 = 0;
  REQUIRE(children >> rank1);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(::kill(rank1, SIGKILL) == 0);
  const auto r = p.wait(60s);
  REQUIRE(r);
  INFO(r->out << r->err);
  CHECK(r->exit_code == 1);
  CHECK(r->err.find("rank 1") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - start < 10s);
}

TEST_CASE("bench over lanes: collectives whose messages are striped, every result checked",
          "[lanes]") {
  // TCP between the ranks (loopback) with four lanes a pair: every message
  // of 128 KiB or more goes in chunks over the lanes, which reductions take
  // as they come; 3 ranks, so the ring's pieces are not powers of two.
  struct Case {
    std::string collective, dtype, op, algo;
  };
  const std::vector<Case> cases = {{"all_reduce", "float32", "sum", "all"},
                                   {"all_reduce", "int32", "max", "ring"},
                                   {"all_reduce", "float16", "sum", "ring"},
                                   {"all_reduce", "bfloat16", "avg", "auto"},
                                   {"all_reduce", "float64", "prod", "ring"},
                                   {"all_reduce", "uint8", "bxor", "ring"},
                                   {"reduce_scatter", "float32", "sum", "all"},
                                   {"all_gather", "int64", "sum", "all"},
                                   {"broadcast", "int16", "sum", "all"}};
  for (const auto& c : cases) {
    INFO(c.collective << " " << c.dtype << " " << c.op << " --algo " << c.algo);
    const auto r = bench({c.collective, "--ranks", "3", "-b", "400K", "-e", "1200K", "-f", "3",
                          "-n", "2", "-w", "1", "-d", c.dtype, "-o", c.op, "--algo", c.algo,
                          "--csv"},
                         {"COLLIE_TRANSPORT=tcp", "COLLIE_STREAMS=4", "COLLIE_LOG_LEVEL=debug"});
    INFO(r.out << r.err.substr(0, 4000));
    REQUIRE(r.exit_code == 0);
    const auto rows = csv_rows(r.out);
    CHECK(!rows.empty());
    for (const auto& row : rows)
      CHECK(row.at("wrong") == "0");
    // The lanes carried chunks (each rank's report at shutdown).
    CHECK_THAT(r.err, ContainsSubstring("lanes to rank") &&
                          ContainsSubstring("chunks"));
  }
}

TEST_CASE("bench buckets: async all_reduces of mixed sizes in flight, each timed alone and in "
          "the set, every element checked") {
  const auto r = bench({"buckets", "--ranks", "3", "--sizes", "64K,4,1K,12", "-n", "2", "-w", "1"});
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  CHECK(r.out.find("3 ranks, 4 async all_reduces") != std::string::npos);
  for (const char* row : {"64 KiB", "4 B", "1 KiB", "12 B"})
    CHECK(r.out.find(row) != std::string::npos);
  CHECK(r.out.find("\n   set ") != std::string::npos);
  CHECK(r.out.find("wrong elements: 0") != std::string::npos);
  // A wrong element fails it: one per set on the spoiling rank, 3 sets.
  const auto spoiled =
      bench({"buckets", "--ranks", "2", "--sizes", "8,64K", "-n", "2", "-w", "1"},
            {"COLLIE_BENCH_SPOIL_RANK=1"});
  INFO(spoiled.out << spoiled.err);
  CHECK(spoiled.exit_code == 1);
  CHECK(spoiled.out.find("wrong elements: 3") != std::string::npos);
  const auto refused = bench({"buckets", "--ranks", "2", "--sizes", "4K,2"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find("--sizes: 2 is under one float32") != std::string::npos);
}
