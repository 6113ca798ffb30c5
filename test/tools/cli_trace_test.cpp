// Traces: a traced 4-rank run (collie bench, every collective and every
// algorithm, stand-alone ranks) writes one valid Chrome trace per rank;
// `collie trace merge` lines them up in one file; in it every collective's
// spans nest (collective > step > send/recv/copy/wait > reduce) and the
// bytes each rank sent and received in each collective are exactly what its
// schedule says.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "support/catch.hpp"

#include <collie/transport/shm.hpp>
#include <nlohmann/json.hpp>

#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/cost.hpp>
#include <collie/collectives/hosts.hpp>
#include <collie/dtype.hpp>
#include <collie/job_config.hpp>

#include "support/cli.hpp"
#include "support/scratch_dir.hpp"
#include "support/subprocess.hpp"

using namespace std::chrono_literals;
using collie::test::run;
using collie::test::ScratchDir;
using nlohmann::json;
namespace cs = collie::collectives;

namespace {

using collie::test::kCollie;

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return json::parse(text.str());  // throws on invalid JSON
}

struct Span {
  std::string name, cat;
  double begin = 0, end = 0;
  json args;
};

}  // namespace

TEST_CASE("a traced 4-rank run: valid trace JSON, nested spans, bytes as the schedules say",
          "[trace]") {
  ScratchDir dir;
  const auto traces = dir.file("traces");
  const auto bench = run({kCollie, "bench", "all", "--algo", "all", "--ranks", "4", "-b", "20",
                          "-e", "200", "-f", "7", "-n", "2", "-w", "1", "--csv"},
                         {"COLLIE_TRACE=" + traces}, {}, 240s);
  INFO(bench.err);
  REQUIRE(bench.exit_code == 0);
  for (int r = 0; r < 4; ++r) {
    const auto doc = read_json(traces + "/collie-trace-rank" + std::to_string(r) + ".json");
    REQUIRE(doc.is_array());
    REQUIRE(doc.size() > 100);
  }
  const auto merged_path = dir.file("trace.json");
  const auto merge = run({kCollie, "trace", "merge", traces, "-o", merged_path});
  INFO(merge.err);
  REQUIRE(merge.exit_code == 0);
  REQUIRE(merge.out.find("merged 4 ranks") != std::string::npos);
  const auto merged = read_json(merged_path);
  REQUIRE(merged["traceEvents"].is_array());

  // Spans per (rank, thread), in time order (parents before children that
  // start with them).
  std::map<std::pair<int, int>, std::vector<Span>> threads;
  std::set<int> ranks_named;
  std::map<int, std::string> labels;  // each rank's transport
  for (const auto& e : merged["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "process_name") ranks_named.insert(e["pid"].get<int>());
      if (e["name"] == "process_labels")
        labels[e["pid"].get<int>()] = e["args"]["labels"].get<std::string>();
      continue;
    }
    REQUIRE(e["ph"] == "X");
    const double ts = e["ts"].get<double>(), dur = e["dur"].get<double>();
    REQUIRE(dur >= 0);
    threads[{e["pid"].get<int>(), e["tid"].get<int>()}].push_back(
        Span{e["name"], e["cat"], ts, ts + dur, e["args"]});
  }
  REQUIRE(ranks_named == std::set<int>{0, 1, 2, 3});
  // Each rank says what carries its messages: all four share this host
  // (through TCP where this machine cannot share memory).
  const bool shm = collie::transport::shared_memory_unusable().empty();
  for (int r = 0; r < 4; ++r) {
    if (shm)
      CHECK(labels[r] == "transport: shm (ranks 0-3)");
    else
      CHECK_THAT(labels[r], StartsWith("transport: tcp on "));
  }
  const std::map<std::string, int> depth = {{"collective", 0}, {"step", 1},   {"send", 2},
                                            {"recv", 2},       {"copy", 2},   {"wait sends", 2},
                                            {"reduce", 3}};
  std::map<std::string, int> collectives_seen;
  const double slack = 0.0021;  // us: ts and dur are printed to 3 decimals
  for (auto& [who, spans] : threads) {
    const int rank = who.first;
    std::stable_sort(spans.begin(), spans.end(), [&](const Span& a, const Span& b) {
      if (a.begin != b.begin) return a.begin < b.begin;
      return depth.at(a.cat) < depth.at(b.cat);
    });
    // Nesting: each span lies inside the innermost open one of smaller depth.
    std::vector<const Span*> open;
    const Span* collective = nullptr;
    std::size_t sent = 0, received = 0;
    auto finish = [&] {
      if (!collective) return;
      // The schedule this rank ran.
      const auto& a = collective->args;
      const auto c = *cs::parse_collective(a["collective"].get<std::string>());
      const auto count = a["count"].get<std::size_t>();
      const auto es = collie::dtype_size(*collie::parse_dtype(a["dtype"].get<std::string>()));
      ++collectives_seen[a["collective"].get<std::string>() + "/" + a["algorithm"].get<std::string>()];
      if (a["algorithm"] == "board") {
        // On the group's board (shared memory): no step, no message.
        INFO("rank " << rank << " " << a.dump());
        REQUIRE(shm);
        REQUIRE((c == cs::Collective::AllReduce || c == cs::Collective::Barrier));
        REQUIRE(count * es <= collie::transport::Board::kBytes);
        REQUIRE(sent == 0);
        REQUIRE(received == 0);
        REQUIRE(a["steps"].get<std::size_t>() == 0);
        return;
      }
      const auto algo = *cs::parse_algorithm(a["algorithm"].get<std::string>());
      // (The four ranks share this host, as init finds.)
      const cs::Shape shape{rank, 4, count, a["root"].get<int>(),
                            cs::pieces_for(count * es, collie::JobConfig{}.segment_bytes),
                            std::make_shared<const cs::Hosts>(cs::uniform_hosts(1, 4, false))};
      const auto schedule = cs::make_schedule(c, algo, shape);
      std::size_t want_sent = 0, want_received = 0;
      for (const auto& st : schedule.steps) {
        for (const auto& t : st.sends) want_sent += t.range.count * es;
        for (const auto& t : st.recvs) want_received += t.range.count * es;
      }
      INFO("rank " << rank << " " << a.dump());
      REQUIRE(sent == want_sent);
      REQUIRE(received == want_received);
      REQUIRE(a["steps"].get<std::size_t>() == schedule.steps.size());
    };
    for (const auto& s : spans) {
      while (!open.empty() && open.back()->end <= s.begin + slack &&
             !(open.back()->end > s.begin && s.end <= open.back()->end + slack))
        open.pop_back();
      INFO("rank " << rank << ": " << s.name << " at " << s.begin);
      const int d = depth.at(s.cat);
      if (d == 0) {
        finish();
        REQUIRE(open.empty());  // collectives on one thread never overlap
        collective = &s;
        sent = received = 0;
      } else {
        REQUIRE(!open.empty());
        REQUIRE(depth.at(open.back()->cat) == d - 1);
        REQUIRE(s.begin >= open.back()->begin - slack);
        REQUIRE(s.end <= open.back()->end + slack);
      }
      if (s.cat == "send") sent += s.args["bytes"].get<std::size_t>();
      if (s.cat == "recv") received += s.args["bytes"].get<std::size_t>();
      if (s.cat != "reduce") open.push_back(&s);
    }
    finish();
  }
  // Every collective and every algorithm ran, traced (the bench's own
  // barriers and all_reduces of timings among them).
  for (auto c : cs::kCollectives)
    for (auto a : cs::algorithms_for(c))
      REQUIRE(collectives_seen.count(std::string(cs::collective_name(c)) + "/" +
                                     std::string(cs::algorithm_name(a))) == 1);
  // Where the ranks share memory, the bench's own small all_reduces and
  // barriers (Auto's) go on the board.
  CHECK(collectives_seen.count("all_reduce/board") == (shm ? 1 : 0));
  CHECK(collectives_seen.count("barrier/board") == (shm ? 1 : 0));
}

TEST_CASE("trace merge: errors name the directory and what is in it", "[trace]") {
  ScratchDir dir;
  const auto missing = run({kCollie, "trace", "merge", dir.file("nope")});
  REQUIRE(missing.exit_code == 1);
  REQUIRE(missing.err.find("is not a directory") != std::string::npos);
  std::ofstream(dir.file("notes.txt")) << "hello";
  const auto empty = run({kCollie, "trace", "merge", dir.path().string()});
  REQUIRE(empty.exit_code == 1);
  REQUIRE(empty.err.find("no collie-trace-rank<R>.json") != std::string::npos);
  REQUIRE(empty.err.find("notes.txt") != std::string::npos);
  std::ofstream(dir.file("collie-trace-rank0.json")) << "{\"not\": \"a trace\"}";
  const auto bad = run({kCollie, "trace", "merge", dir.path().string()});
  REQUIRE(bad.exit_code == 1);
  REQUIRE(bad.err.find("collie-trace-rank0.json") != std::string::npos);
}

TEST_CASE("trace merge: a rank cut short (no closing bracket) is merged, with a warning",
          "[trace]") {
  ScratchDir dir;
  std::ofstream(dir.file("collie-trace-rank0.json"))
      << "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"rank "
         "0\",\"collie_unix_us\":1000}},\n{\"name\":\"step 0\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":"
         "1.0,\"dur\":2.0,\"pid\":0,\"tid\":1,\"args\":{\"step\":0}},\n{\"name\":\"send\",\"ca";
  std::ofstream(dir.file("collie-trace-rank1.json"))
      << "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"rank "
         "1\",\"collie_unix_us\":1500}},\n{\"name\":\"step 0\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":"
         "1.0,\"dur\":2.0,\"pid\":1,\"tid\":1,\"args\":{\"step\":0}}\n]\n";
  const auto out = dir.file("merged.json");
  const auto merge = run({kCollie, "trace", "merge", dir.path().string(), "-o", out});
  INFO(merge.err);
  REQUIRE(merge.exit_code == 0);
  REQUIRE(merge.err.find("rank 0 did not finish") != std::string::npos);
  const auto doc = read_json(out);
  // Rank 1 started 500 us after rank 0: its events move by 500 us.
  std::map<int, double> ts;
  for (const auto& e : doc["traceEvents"])
    if (e["ph"] == "X") ts[e["pid"].get<int>()] = e["ts"].get<double>();
  REQUIRE(ts.at(0) == Approx(1.0));
  REQUIRE(ts.at(1) == Approx(501.0));
}
