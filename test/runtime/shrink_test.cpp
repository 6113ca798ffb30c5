// ProcessGroup::shrink() with every member alive, ranks as threads of this
// process (a file:// store): the agreement, the revocation, a second call,
// a sub-group's shrink among its members only, and a member that never
// calls it. Ranks killed mid-call: shrink_launch_test.cpp.
#include <future>
#include <numeric>
#include <thread>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/process_group.hpp>

#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;

namespace {

// The sum over a group's ranks of (world rank + 1), by an all_reduce.
int sum_of_world_ranks(collie::ProcessGroup& pg, int world_rank) {
  std::int32_t v = world_rank + 1;
  pg.all_reduce(std::span(&v, 1));
  return v;
}

}  // namespace

TEST_CASE("shrink with every member alive: the same members, the old group revoked",
          "[shrink]") {
  collie::test::run_ranks(3, [](collie::ProcessGroup& pg) {
    const int me = pg.rank();
    auto next = pg.shrink();
    expect(next.size() == 3 && next.rank() == me,
           fmt::format("rank {}: shrunk to rank {} of {}", me, next.rank(), next.size()));
    expect(sum_of_world_ranks(next, me) == 6, "the new group's sum");
    // The old group is revoked, saying why.
    try {
      sum_of_world_ranks(pg, me);
      expect(false, "a call on the revoked group went through");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("shrink() replaced it with shrunk group [0, 1, 2]") !=
                 std::string::npos,
             std::string("the revoked group's error: ") + e.what());
    }
    // A second shrink returns the same group: its calls stay in step.
    auto again = pg.shrink();
    expect(sum_of_world_ranks(again, me) == 6, "the group of the second shrink");
    expect(sum_of_world_ranks(next, me) == 6, "the first handle after the second shrink");
    // A group made from the revoked one cannot agree on its tag space.
    bool refused = false;
    try {
      pg.new_group({0, 1, 2});
    } catch (const collie::Error&) {
      refused = true;
    }
    expect(refused, "new_group on a revoked group went through");
  });
}

TEST_CASE("shrink of a sub-group involves only its members", "[shrink]") {
  collie::test::run_ranks(4, [](collie::ProcessGroup& pg) {
    const int me = pg.rank();
    auto sub = pg.new_group({3, 1, 2});
    if (me == 0) {
      // Not a member: it may not shrink it, and the world goes on.
      bool refused = false;
      try {
        sub.shrink();
      } catch (const collie::Error&) {
        refused = true;
      }
      expect(refused, "rank 0 shrank a group it is not a member of");
    } else {
      auto shrunk = sub.shrink();
      expect(shrunk.size() == 3 && shrunk.rank() == sub.rank(),
             fmt::format("rank {}: rank {} of {} after the shrink", me, shrunk.rank(),
                         shrunk.size()));
      expect(sum_of_world_ranks(shrunk, me) == 2 + 3 + 4, "the shrunk sub-group's sum");
    }
    expect(sum_of_world_ranks(pg, me) == 10, "the world after its sub-group shrank");
  });
}

TEST_CASE("shrink: a member that never calls it is named at the timeout", "[shrink]") {
  std::promise<void> others_done;
  auto done = others_done.get_future().share();
  std::atomic<int> finished{0};
  collie::test::run_ranks(3, [&](collie::ProcessGroup& pg) {
    const int me = pg.rank();
    if (me == 2) {
      // Alive and elsewhere in its program until the others gave up.
      done.wait();
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      pg.shrink(1500ms);
      expect(false, "shrink went through without rank 2");
    } catch (const collie::TimeoutError& e) {
      const std::string what = e.what();
      expect(what.find("have not called shrink") != std::string::npos &&
                 what.find("rank 2") != std::string::npos,
             "the timeout's words: " + what);
    }
    expect(std::chrono::steady_clock::now() - start >= 1400ms, "it gave up before its timeout");
    if (++finished == 2) others_done.set_value();
  });
}
