// collie::init() and the process group's point-to-point API, with the ranks
// as threads of this process meeting through a file:// store.
#include <atomic>
#include <fstream>
#include <future>
#include <numeric>
#include <regex>
#include <sstream>
#include <thread>

#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/process_group.hpp>

#include "support/eventually.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;
using collie::test::run_ranks;

TEST_CASE("init over file:// joins every rank, and typed spans travel intact", "[process_group]") {
  run_ranks(3, [](collie::ProcessGroup& pg) {
    expect(pg.size() == 3, "size");
    const int next = (pg.rank() + 1) % 3;
    const int prev = (pg.rank() + 2) % 3;
    std::vector<double> out(1000), in(1000);
    std::iota(out.begin(), out.end(), pg.rank() * 1000.0);
    auto s = pg.isend(std::span(out), next, 5);
    pg.recv(std::span(in), prev, 5);
    s.wait();
    for (std::size_t i = 0; i < in.size(); ++i)
      expect(in[i] == prev * 1000.0 + static_cast<double>(i), "element " + std::to_string(i));
    // Raw bytes, and 16-bit floats.
    std::vector<collie::bfloat16> h(7, collie::bfloat16(1.5f * static_cast<float>(pg.rank())));
    std::vector<collie::bfloat16> g(7);
    auto r = pg.irecv(std::span(g), prev, 6);
    pg.send(h.data(), h.size() * sizeof(h[0]), next, 6);
    r.wait();
    expect(r.is_completed(), "is_completed after wait");
    for (const auto& x : g)
      expect(static_cast<float>(x) == 1.5f * static_cast<float>(prev), "bfloat16");
  });
}

TEST_CASE("a world of one sends to itself", "[process_group]") {
  run_ranks(1, [](collie::ProcessGroup& pg) {
    std::vector<std::int64_t> out = {1, -2, 3}, in(3);
    pg.send(std::span(out), 0, 1);
    pg.recv(std::span(in), 0, 1);
    expect(in == out, "self message");
  });
}

TEST_CASE("process group argument errors say what is wrong", "[process_group]") {
  std::string bad_rank, bad_tag;
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    if (pg.rank() != 0) return;
    int x = 0;
    try {
      pg.send(std::span(&x, 1), 2);
    } catch (const collie::Error& e) {
      bad_rank = e.what();
    }
    try {
      pg.send(std::span(&x, 1), 1, -1);
    } catch (const collie::Error& e) {
      bad_tag = e.what();
    }
  });
  CHECK_THAT(bad_rank, ContainsSubstring("rank 2") && ContainsSubstring("ranks 0 to 1"));
  CHECK_THAT(bad_tag, ContainsSubstring("tag -1"));
}

TEST_CASE("Work: wait(timeout) throws naming the peer, and is_completed never blocks",
          "[process_group]") {
  std::string error;
  bool completed_early = true;
  std::atomic<bool> gave_up{false};
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> buffer(256);
    if (pg.rank() == 1) {
      auto w = pg.irecv(std::span(buffer), 0, 3);  // rank 0 sends tag 4, never 3
      completed_early = w.is_completed();
      try {
        w.wait(150ms);
      } catch (const collie::TimeoutError& e) {
        error = e.what();
      }
      gave_up = true;
      pg.recv(std::span(buffer), 0, 4);
      expect(buffer[255] == 7.0f, "tag 4 payload");
    } else {
      // Tag 4 goes once rank 1 has given up on tag 3.
      expect(collie::test::eventually([&] { return gave_up.load(); }), "rank 1 gave up");
      std::fill(buffer.begin(), buffer.end(), 7.0f);
      pg.send(std::span(buffer), 1, 4);
    }
  });
  CHECK_FALSE(completed_early);
  CHECK_THAT(error, ContainsSubstring("recv from rank 0") && ContainsSubstring("tag 3") &&
                        ContainsSubstring("150 ms") && ContainsSubstring("0 of 1024 bytes received"));
}

TEST_CASE("Work destroyed while pending waits, so the buffer is filled when it is gone",
          "[process_group]") {
  std::atomic<bool> posted{false};
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<int> buffer(100000, 0);
    if (pg.rank() == 1) {
      {
        auto w = pg.irecv(std::span(buffer), 0);
        expect(!w.is_completed(), "pending before rank 0 sends");
        posted = true;
      }  // waits here
      expect(buffer.front() == 42 && buffer.back() == 42, "received before the Work was gone");
    } else {
      // The message goes once rank 1's Work is pending and on its way out.
      expect(collie::test::eventually([&] { return posted.load(); }), "rank 1 posted");
      std::fill(buffer.begin(), buffer.end(), 42);
      pg.send(std::span(buffer), 1);
    }
  });
}

TEST_CASE(
    "tracing: InitOptions::trace_dir writes one Chrome trace per rank, and a directory that "
    "cannot be made fails init, named",
    "[trace]") {
  collie::test::ScratchDir dir;
  const auto traces = dir.path() / "traces";
  run_ranks(
      2,
      [](collie::ProcessGroup& pg) {
        // (More than a board entry holds: messages, whose spans are traced.)
        std::vector<float> data(2000, 1.0f);
        pg.all_reduce(std::span(data));
        pg.barrier();
      },
      30s, [&](collie::InitOptions& o) { o.trace_dir = traces.string(); });
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(traces / ("collie-trace-rank" + std::to_string(r) + ".json"));
    std::stringstream text;
    text << in.rdbuf();
    const auto t = text.str();
    // Closed (the world went away), and holding both collectives' spans
    // with what they were.
    REQUIRE(t.rfind("\n]\n") == t.size() - 3);
    REQUIRE(t.find("\"name\":\"all_reduce\",\"cat\":\"collective\"") != std::string::npos);
    REQUIRE(t.find("\"count\":2000,\"bytes\":8000") != std::string::npos);
    REQUIRE(t.find("\"name\":\"barrier\",\"cat\":\"collective\"") != std::string::npos);
    REQUIRE(t.find("\"cat\":\"send\"") != std::string::npos);
  }
  std::ofstream(dir.path() / "a_file") << "x";
  REQUIRE_THROWS_WITH(
      run_ranks(
          1, [](collie::ProcessGroup&) {}, 30s,
          [&](collie::InitOptions& o) { o.trace_dir = (dir.path() / "a_file" / "sub").string(); }),
      ContainsSubstring("COLLIE_TRACE: cannot create the directory") && ContainsSubstring("a_file"));
}

TEST_CASE("two jobs on one store: a rank whose number is taken fails at once, naming it",
          "[process_group][security]") {
  // Two jobs that share a store (a MASTER_PORT, here a store file) by mistake.
  collie::test::ScratchDir dir;
  collie::InitOptions o;
  o.init_method = "file://" + (dir.path() / "store").string();
  o.rank = 0;
  o.world_size = 1;
  o.timeout = 30s;
  auto job_a = collie::init(o);
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(collie::init(o), ContainsSubstring("rank 0 is already taken in the store file") &&
                                         ContainsSubstring("is another job using this file?"));
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  // Job A is unharmed.
  std::vector<int> v{3};
  job_a.all_reduce(std::span(v));
  CHECK(v[0] == 3);
}

TEST_CASE("a collective that times out says how long it waited and its limit", "[process_group]") {
  std::string error;
  std::atomic<bool> done{false};
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(2000, 1.0f);  // (by messages: more than a board entry holds)
    if (pg.rank() == 0) {
      collie::CollectiveOptions o;
      o.timeout = 300ms;
      try {
        pg.all_reduce(std::span(v), collie::ReduceOp::Sum, o);
      } catch (const collie::TimeoutError& e) {
        error = e.what();
      }
      done = true;
    } else {
      // Rank 1 never calls it, and stays until rank 0 has given up.
      expect(collie::test::eventually([&] { return done.load(); }, 60s), "rank 0 gave up");
    }
  });
  INFO(error);
  CHECK_THAT(error, ContainsSubstring("all_reduce") && ContainsSubstring("recv from rank 1") &&
                        ContainsSubstring("timed out (0 of 8000 bytes received)") &&
                        ContainsSubstring("the call's timeout ran out after") &&
                        ContainsSubstring("(it is 300 ms") && !ContainsSubstring("after 0 ms"));
  // What torch's callers (and its own tests) match a timeout by.
  CHECK(std::regex_search(error, std::regex(" (Timed out|closed|timeout) ")));
}

TEST_CASE("init names the ranks that never joined, and where the others are", "[process_group]") {
  // Ranks 0 and 2 of a world of 4 come; 1 and 3 never do.
  collie::test::ScratchDir dir;
  std::vector<std::future<std::string>> errors;
  for (int rank : {0, 2}) {
    errors.push_back(std::async(std::launch::async, [&, rank] {
      collie::InitOptions o;
      o.init_method = "file://" + (dir.path() / "store").string();
      o.rank = rank;
      o.world_size = 4;
      o.timeout = 2s;
      try {
        collie::init(o);
      } catch (const collie::TimeoutError& e) {
        return std::string(e.what());
      }
      return std::string("joined");
    }));
  }
  for (auto& f : errors) {
    const auto error = f.get();
    INFO(error);
    CHECK_THAT(error, ContainsSubstring("for all 4 ranks to join, and ranks 1, 3 never joined "
                                      "(joined: rank 0 at ") &&
                          ContainsSubstring(", rank 2 at "));
  }
}
