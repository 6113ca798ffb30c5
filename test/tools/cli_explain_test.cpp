// `collie explain`: golden text and JSON for two small cases (the ring
// all_reduce on 4 ranks, the tree broadcast on 5 ranks with root 2), the
// comparison, errors that list what exists, and the html page in a real
// browser (headless Chromium: it steps through every step and back and
// checks what it drew against the data). The final state of every
// algorithm on worlds 1 to 9 is checked in test/collectives/explain_test.cpp.
//
// After a deliberate change to the output, rewrite the golden files with
//   COLLIE_UPDATE_GOLDEN=1 build/release/test/collie_cli_tests '[explain]'
// and read the diff before committing it.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/build_paths.hpp"
#include "support/catch.hpp"

#include <collie/collectives/cost.hpp>
#include <nlohmann/json.hpp>

#include "support/cli.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::run;
using collie::test::RunResult;
using collie::test::ScratchDir;

namespace {

const std::filesystem::path kGolden = collie::test::paths::kGolden;

RunResult explain(const std::vector<std::string>& args) {
  return collie::test::collie_cli("explain", args);
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void check_golden(const std::string& name, const std::string& actual) {
  const auto path = kGolden / name;
  if (const char* update = std::getenv("COLLIE_UPDATE_GOLDEN"); update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    WARN("rewrote " << path.string());
    return;
  }
  REQUIRE(std::filesystem::exists(path));
  const auto expected = read_file(path);
  // Line by line, so that a failure shows the first line that differs.
  std::istringstream e(expected), a(actual);
  std::string el, al;
  int line = 0;
  while (true) {
    const bool more_e = static_cast<bool>(std::getline(e, el));
    const bool more_a = static_cast<bool>(std::getline(a, al));
    ++line;
    INFO(name << " line " << line);
    REQUIRE(more_e == more_a);
    if (!more_e) break;
    REQUIRE(al == el);
  }
  REQUIRE(actual == expected);
}

}  // namespace

TEST_CASE("explain: the ring all_reduce on 4 ranks, text and json, as the golden files", "[explain]") {
  const auto text = explain({"all_reduce", "--algo", "ring", "--ranks", "4"});
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  REQUIRE(text.out.find("\033[") == std::string::npos);  // no color into a pipe
  check_golden("ring_all_reduce_4.txt", text.out);

  const auto json = explain({"all_reduce", "--algo", "ring", "--ranks", "4", "--format", "json"});
  REQUIRE(json.exit_code == 0);
  check_golden("ring_all_reduce_4.json", json.out);
  // And what the golden file says, checked on its own: 2 (n - 1) steps of
  // one message per rank; every rank ends with a_i+b_i+c_i+d_i in element i.
  const auto doc = nlohmann::json::parse(json.out);
  REQUIRE(doc["steps"].size() == 6);
  for (const auto& step : doc["steps"]) REQUIRE(step["messages"].size() == 4);
  // (Runs whose symbols continue one another are one run: element i of
  // a[0..3]+b[0..3]+c[0..3]+d[0..3] is ai+bi+ci+di.)
  for (const auto& rank : doc["steps"].back()["state"]) {
    REQUIRE(rank.size() == 1);
    REQUIRE(rank[0]["offset"] == 0);
    REQUIRE(rank[0]["count"] == 4);
    REQUIRE(rank[0]["label"] == "a[0..3]+b[0..3]+c[0..3]+d[0..3]");
    REQUIRE(rank[0]["symbols"] == nlohmann::json::parse("[[0,0],[1,0],[2,0],[3,0]]"));
  }
  // Mid-way, after step 3 (the reduce-scatter half), rank 0 holds the whole
  // sum of chunk 1 alone.
  REQUIRE(doc["steps"][2]["state"][0][1]["label"] == "a1+b1+c1+d1");
  REQUIRE(doc["cost"]["steps"] == 6);
  REQUIRE(doc["cost"]["messages_per_rank"] == 6);
  REQUIRE(doc["cost"]["bytes_per_rank"] == 24);  // 2 (n - 1) chunks of 4 bytes
  REQUIRE(doc["check"] == "ok");
}

TEST_CASE("explain: the tree broadcast on 5 ranks from root 2, text and json, as the golden files",
          "[explain]") {
  const auto text = explain({"broadcast", "--algo", "tree", "--ranks", "5", "--root", "2"});
  INFO(text.err);
  REQUIRE(text.exit_code == 0);
  check_golden("tree_broadcast_5_root2.txt", text.out);
  const auto json =
      explain({"broadcast", "--algo", "tree", "--ranks", "5", "--root", "2", "--format", "json"});
  REQUIRE(json.exit_code == 0);
  check_golden("tree_broadcast_5_root2.json", json.out);
  const auto doc = nlohmann::json::parse(json.out);
  // A binomial tree: ceil(log2 5) = 3 steps, 4 messages in all, each the
  // root's whole buffer.
  REQUIRE(doc["steps"].size() == 3);
  std::size_t messages = 0;
  for (const auto& step : doc["steps"]) {
    for (const auto& m : step["messages"]) {
      REQUIRE(m["content"] == "c[0..4]");
      ++messages;
    }
  }
  REQUIRE(messages == 4);
  for (const auto& rank : doc["steps"].back()["state"]) REQUIRE(rank[0]["label"] == "c[0..4]");
}

TEST_CASE("explain --compare: every algorithm of the collective, Auto's pick marked", "[explain]") {
  const auto small = explain({"all_reduce", "--ranks", "8", "--count", "1", "--compare"});
  REQUIRE(small.exit_code == 0);
  for (const char* algo : {"ring", "halving_doubling", "recursive_doubling", "tree"})
    REQUIRE(small.out.find(std::string("\n  ") + algo) != std::string::npos);
  REQUIRE(small.out.find("<- Auto") != std::string::npos);
  // The textbook picture: for 4 bytes the ring's 14 steps lose to the
  // logarithmic algorithms; at 64 MiB the ring's bandwidth term wins over
  // recursive doubling, which sends the whole buffer every step.
  auto auto_line = [](const std::string& out) {
    const auto at = out.find("<- Auto");
    const auto start = out.rfind("\n  ", at) + 3;
    return out.substr(start, out.find(' ', start) - start);
  };
  REQUIRE(auto_line(small.out) != "ring");
  const auto json =
      explain({"all_reduce", "--ranks", "8", "--count", "16M", "--compare", "--format", "json"});
  REQUIRE(json.exit_code == 0);
  const auto doc = nlohmann::json::parse(json.out);
  double ring = 0, recursive = 0;
  for (const auto& c : doc["compare"]) {
    if (c["algorithm"] == "ring") ring = c["seconds"].get<double>();
    if (c["algorithm"] == "recursive_doubling") recursive = c["seconds"].get<double>();
  }
  REQUIRE(ring > 0);
  REQUIRE(ring < recursive);
  REQUIRE(doc["auto"] != "recursive_doubling");
}

TEST_CASE("explain --cores: ranks that outnumber a machine's cores change the cost and Auto",
          "[explain]") {
  // 4 ranks on 2 cores, 64 KiB each: the work of the ranks bounds the
  // time; the tree, which keeps half of them idle, is Auto's pick, where a
  // core per rank picks another (the model of collectives/cost.hpp).
  const auto crowded = explain({"all_reduce", "--ranks", "4", "--count", "16K", "--cores", "2",
                                "--compare", "--format", "json"});
  REQUIRE(crowded.exit_code == 0);
  const auto doc = nlohmann::json::parse(crowded.out);
  CHECK(doc["auto"] == "tree");
  CHECK(doc["cost"]["model"]["ranks_per_core"] == 2.0);
  const auto alone =
      explain({"all_reduce", "--ranks", "4", "--count", "16K", "--compare", "--format", "json"});
  REQUIRE(alone.exit_code == 0);
  const auto doc1 = nlohmann::json::parse(alone.out);
  CHECK(doc1["auto"] != "tree");
  CHECK(doc1["cost"]["model"]["ranks_per_core"] == 1.0);
  // Every algorithm costs at least as much crowded as alone.
  for (std::size_t i = 0; i < doc["compare"].size(); ++i)
    CHECK(doc["compare"][i]["seconds"].get<double>() >=
          doc1["compare"][i]["seconds"].get<double>());
  const auto text = explain({"all_reduce", "--ranks", "4", "--count", "16K", "--cores", "2"});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("2 ranks per core (the crowded-host bound)") != std::string::npos);
  const auto bad = explain({"all_reduce", "--cores", "-1"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("--cores -1") != std::string::npos);
}

TEST_CASE("explain --transport shm: shared memory's model, as the runtime's on one host",
          "[explain]") {
  // 4 ranks on 2 cores, 8 B: over TCP the tree (the crowded-host bound);
  // through shared memory a step costs a switch, and recursive doubling
  // takes 2 steps to the tree's 4.
  const auto shm = explain({"all_reduce", "--ranks", "4", "--count", "2", "--cores", "2",
                            "--transport", "shm", "--compare", "--format", "json"});
  REQUIRE(shm.exit_code == 0);
  const auto doc = nlohmann::json::parse(shm.out);
  CHECK(doc["auto"] == "recursive_doubling");
  CHECK(doc["cost"]["model"]["transport"] == "shm");
  CHECK(doc["cost"]["model"]["alpha_seconds"].get<double>() ==
        collie::collectives::shared_memory_cost_model(2).alpha);
  const auto tcp = explain({"all_reduce", "--ranks", "4", "--count", "2", "--cores", "2",
                            "--compare", "--format", "json"});
  REQUIRE(tcp.exit_code == 0);
  const auto doc1 = nlohmann::json::parse(tcp.out);
  CHECK(doc1["auto"] == "tree");
  CHECK(doc1["cost"]["model"]["transport"] == "tcp");
  const auto text = explain({"all_reduce", "--ranks", "2", "--transport", "shm"});
  REQUIRE(text.exit_code == 0);
  CHECK(text.out.find("shared memory: alpha 0.4 us per message") != std::string::npos);
  const auto bad = explain({"all_reduce", "--transport", "rdma"});
  CHECK(bad.exit_code != 0);
  CHECK(bad.err.find("rdma") != std::string::npos);
}

TEST_CASE("explain --hosts: the hosts named, rings by host, two_level step by step",
          "[explain][hosts]") {
  const auto two = explain({"all_reduce", "--algo", "two_level", "--hosts", "4",
                            "--ranks-per-host", "2", "--color", "never"});
  INFO(two.out << two.err);
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.out, StartsWith("all_reduce on 8 ranks (4 hosts x 2 ranks, by host)"));
  CHECK_THAT(two.out, ContainsSubstring("with two_level: 8 steps"));
  CHECK_THAT(two.out, ContainsSubstring("Hosts (4 hosts x 2 ranks, by host): host 0: ranks 0, 1; "
                                      "host 1: ranks 2, 3;"));
  // Within each host first (a reduce-scatter between its two ranks)...
  CHECK_THAT(two.out, ContainsSubstring("step 1: 8 messages (128 B)\n  rank 1 -> rank 0: [0..3] "
                                      "b[0..3], reduced"));
  // ... then across: each host's stripe owners in a ring of hosts, each
  // host sending to the one before it.
  CHECK_THAT(two.out, ContainsSubstring("step 2: 8 messages (32 B)\n  rank 2 -> rank 0: [1] c1+d1, "
                                      "reduced"));
  CHECK_THAT(two.out, ContainsSubstring("Final state checked"));
  // Numbered round robin, the ring still goes host by host: 0, 4, 1, 5, ...
  const auto ring = explain({"all_reduce", "--algo", "ring", "--hosts", "4", "--placement",
                             "round-robin", "--ranks", "8", "--format", "json"});
  REQUIRE(ring.exit_code == 0);
  const auto doc = nlohmann::json::parse(ring.out);
  CHECK(doc["hosts"] == nlohmann::json::array({0, 1, 2, 3, 0, 1, 2, 3}));
  CHECK(doc["schedule"][0][0]["sends"][0]["peer"] == 4);
  CHECK(doc["schedule"][4][0]["sends"][0]["peer"] == 1);
  CHECK(doc["check"] == "ok");
  // Without --hosts, no hosts.
  const auto plain = explain({"all_reduce", "--format", "json"});
  CHECK(nlohmann::json::parse(plain.out)["hosts"].is_null());
  const auto uneven = explain({"all_reduce", "--hosts", "3", "--ranks", "7"});
  CHECK(uneven.exit_code == 1);
  CHECK_THAT(uneven.err, ContainsSubstring("--ranks 7 does not divide among them"));
  const auto clash = explain({"all_reduce", "--hosts", "2", "--ranks-per-host", "2", "--ranks",
                              "6"});
  CHECK(clash.exit_code == 1);
  CHECK_THAT(clash.err, ContainsSubstring("--ranks 6 is not --hosts 2 x --ranks-per-host 2"));
  const auto alone = explain({"all_reduce", "--ranks-per-host", "2"});
  CHECK(alone.exit_code == 1);
  CHECK_THAT(alone.err, ContainsSubstring("--ranks-per-host needs --hosts"));
}

TEST_CASE("explain: more than 8 ranks are summarised, --full shows them all", "[explain]") {
  const auto summary = explain({"all_gather", "--ranks", "12"});
  REQUIRE(summary.exit_code == 0);
  REQUIRE(summary.out.find("showing ranks 0, 1, 11") != std::string::npos);
  REQUIRE(summary.out.find("rank 5 ") == std::string::npos);
  const auto full = explain({"all_gather", "--ranks", "12", "--full"});
  REQUIRE(full.out.find("  rank 5 ") != std::string::npos);
  REQUIRE(full.out.find("Final state checked") != std::string::npos);
}

TEST_CASE("explain: impossible requests list what there is", "[explain]") {
  const auto algo = explain({"broadcast", "--algo", "ring_of_fire"});
  REQUIRE(algo.exit_code == 1);
  REQUIRE(algo.err.find("broadcast has no algorithm 'ring_of_fire'; it has: auto, tree, ring") !=
          std::string::npos);
  const auto wrong_family = explain({"all_to_all", "--algo", "tree"});
  REQUIRE(wrong_family.exit_code == 1);
  REQUIRE(wrong_family.err.find("it has: auto, pairwise") != std::string::npos);
  const auto root = explain({"scatter", "--ranks", "3", "--root", "3"});
  REQUIRE(root.exit_code == 1);
  REQUIRE(root.err.find("root 3 is not a rank of 3 (ranks 0 to 2)") != std::string::npos);
  const auto collective = explain({"allreduse"});
  REQUIRE(collective.exit_code == 1);
  REQUIRE(collective.err.find("collie has: broadcast, reduce, all_reduce") != std::string::npos);
  const auto ranks = explain({"all_reduce", "--ranks", "0"});
  REQUIRE(ranks.exit_code == 1);
  REQUIRE(ranks.err.find("explain shows 1 to 64 ranks") != std::string::npos);
  const auto format = explain({"all_reduce", "--format", "pdf"});
  REQUIRE(format.exit_code == 1);
  REQUIRE(format.err.find("text, json or html") != std::string::npos);
}

TEST_CASE("explain: world size 1 and count 0 explain in zero steps, still checked", "[explain]") {
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"all_reduce", "--ranks", "1"}, {"all_gather", "--ranks", "3", "--count", "0"}}) {
    const auto r = explain(args);
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.out.find(": 0 steps") != std::string::npos);
    REQUIRE(r.out.find("Final state checked") != std::string::npos);
  }
}

#if COLLIE_TEST_BROWSER
TEST_CASE("explain: the html page loads in headless Chromium, steps through without errors, and "
          "draws",
          "[explain][browser]") {
  const char* chromium = "/usr/bin/chromium";
  INFO("the browser test needs Debian's chromium: tools/setup.sh --test installs it");
  REQUIRE(std::filesystem::exists(chromium));
  ScratchDir dir;
  struct Case {
    std::vector<std::string> args;
    std::string steps;
    std::string drawn = "";  // also on the page
  };
  for (const auto& c : std::vector<Case>{
           {{"all_reduce", "--algo", "ring", "--ranks", "4"}, "6 steps"},
           {{"broadcast", "--algo", "tree", "--ranks", "5", "--root", "2", "--compare"}, "3 steps"},
           {{"all_to_all", "--ranks", "3", "--count", "40"}, "3 steps"},
           {{"all_reduce", "--algo", "two_level", "--hosts", "4", "--ranks-per-host", "2",
             "--placement", "round-robin"},
            "8 steps",
            "class=\"host-label\" x=\""}}) {
    INFO(c.args[0] << ": " << c.steps);
    const auto page = dir.file("page.html");
    auto args = c.args;
    args.insert(args.end(), {"--format", "html", "-o", page});
    const auto made = explain(args);
    REQUIRE(made.exit_code == 0);
    const auto html = read_file(page);
    // Self-contained: nothing fetched from anywhere.
    REQUIRE(html.find("src=") == std::string::npos);
    REQUIRE(html.find("http://") == html.find("http://www.w3.org/2000/svg"));
    REQUIRE(html.find("https://") == std::string::npos);
    const std::vector<std::string> browser = {chromium, "--headless", "--no-sandbox",
                                              "--disable-gpu", "--user-data-dir=" + dir.file("profile"),
                                              "--enable-logging=stderr", "--v=0"};
    auto dump = browser;
    dump.insert(dump.end(), {"--dump-dom", "file://" + page + "#selftest"});
    const auto loaded = run(dump, {}, {}, 60s);
    INFO(loaded.err);
    REQUIRE(loaded.exit_code == 0);
    REQUIRE(loaded.out.find("data-selftest=\"ok ") != std::string::npos);
    REQUIRE(loaded.out.find(", " + c.steps + "\"") != std::string::npos);
    REQUIRE(loaded.out.find("data-errors=") == std::string::npos);
    if (!c.drawn.empty()) REQUIRE(loaded.out.find(c.drawn) != std::string::npos);
    REQUIRE(loaded.err.find("Uncaught") == std::string::npos);
    // What a person sees: a screenshot, mid-way.
    auto shot = browser;
    const auto png = dir.file("page.png");
    shot.insert(shot.end(), {"--screenshot=" + png, "--window-size=1200,800",
                             "file://" + page + "#step=1"});
    REQUIRE(run(shot, {}, {}, 60s).exit_code == 0);
    const auto image = read_file(png);
    REQUIRE(image.size() > 20000);  // a blank page is ~3 KB
    REQUIRE(image.substr(1, 3) == "PNG");
  }
}
#endif

TEST_CASE("docs/algorithms.md: every collie explain excerpt is what the command prints today",
          "[explain][docs]") {
  const auto doc = read_file(std::filesystem::path(collie::test::paths::kDocs) / "algorithms.md");
  std::istringstream in(doc);
  std::string line;
  int excerpts = 0;
  const std::string marker = "<!-- collie explain ";
  while (std::getline(in, line)) {
    if (line.rfind(marker, 0) != 0) continue;
    const auto args_text = line.substr(marker.size(), line.size() - marker.size() - 4);
    std::vector<std::string> args;
    std::istringstream words(args_text);
    for (std::string w; words >> w;) args.push_back(w);
    args.push_back("--color");
    args.push_back("never");
    REQUIRE(std::getline(in, line));
    REQUIRE(line == "```text");
    std::string block;
    while (std::getline(in, line) && line != "```") block += line + "\n";
    INFO("docs/algorithms.md: 'collie explain " << args_text
                                                << "' changed: run tools/explain_docs.sh");
    const auto now = explain(args);
    REQUIRE(now.exit_code == 0);
    REQUIRE(now.out == block);
    ++excerpts;
  }
  REQUIRE(excerpts >= 6);
}
