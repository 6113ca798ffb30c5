// Schedules, checked by symbolic execution: every rank must end with
// exactly the contributions it should (each rank's once, for a reduction).
#include <numeric>

#include <catch2/catch.hpp>

#include <collie/collectives/ring.hpp>
#include <collie/collectives/schedule.hpp>
#include <collie/error.hpp>

using namespace collie::collectives;

namespace {

std::vector<std::size_t> counts_for(int world) {
  std::vector<std::size_t> counts = {0, 1, 1009};                        // 1009: a prime
  if (world > 2) counts.push_back(static_cast<std::size_t>(world) - 1);  // fewer than the ranks
  counts.push_back(static_cast<std::size_t>(world));
  counts.push_back(static_cast<std::size_t>(world) * 3 + 1);
  return counts;
}

Contribution everyone(int world) {
  Contribution all(static_cast<std::size_t>(world));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::vector<Schedule> all_ranks(int world, std::size_t count,
                                Schedule (*make)(int, int, std::size_t)) {
  std::vector<Schedule> s;
  for (int r = 0; r < world; ++r)
    s.push_back(make(r, world, count));
  return s;
}

}  // namespace

TEST_CASE("chunk cuts a buffer into contiguous, nearly equal pieces", "[schedule]") {
  for (std::size_t count = 0; count <= 40; ++count) {
    for (int parts = 1; parts <= 16; ++parts) {
      std::size_t next = 0;
      for (int i = 0; i < parts; ++i) {
        const auto c = chunk(count, parts, i);
        REQUIRE(c.offset == next);
        REQUIRE(c.count >= count / static_cast<std::size_t>(parts));
        REQUIRE(c.count <= count / static_cast<std::size_t>(parts) + 1);
        next += c.count;
      }
      REQUIRE(next == count);
    }
  }
}

TEST_CASE("ring all_reduce: every rank ends with every contribution once, worlds 1 to 16",
          "[schedule][ring]") {
  for (int world = 1; world <= 16; ++world) {
    for (std::size_t count : counts_for(world)) {
      INFO("world " << world << ", count " << count);
      const auto schedules = all_ranks(world, count, ring_all_reduce);
      const auto result = simulate(schedules, own_contributions(world, count));
      for (int r = 0; r < world; ++r)
        for (std::size_t i = 0; i < count; ++i)
          REQUIRE(result[static_cast<std::size_t>(r)][i] == everyone(world));
      // Bandwidth-optimal: each rank sends 2 (n - 1) chunks, at most one
      // element more than its share per chunk.
      for (const auto& s : schedules) {
        std::size_t sent = 0;
        for (const auto& step : s.steps)
          for (const auto& t : step.sends)
            sent += t.range.count;
        const auto n = static_cast<std::size_t>(world);
        REQUIRE(sent <= 2 * (n - 1) * ((count + n - 1) / n));
        if (count % n == 0) REQUIRE(sent == 2 * (n - 1) * count / n);
        REQUIRE(s.steps.size() <= 2 * (n - 1));
      }
    }
  }
}

TEST_CASE("simulate catches broken schedules", "[schedule]") {
  auto two = [](std::size_t count) {
    std::vector<Schedule> s(2);
    for (auto& x : s)
      x.buffer_count = count;
    return s;
  };
  SECTION("both ranks receive first: deadlock") {
    auto s = two(4);
    s[0].steps.push_back({{}, {{1, {0, 4}, Combine::Copy}}});
    s[1].steps.push_back({{}, {{0, {0, 4}, Combine::Copy}}});
    s[0].steps.push_back({{{1, {0, 4}}}, {}});
    s[1].steps.push_back({{{0, {0, 4}}}, {}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), Catch::Contains("deadlock"));
  }
  SECTION("sizes that differ") {
    auto s = two(4);
    s[0].steps.push_back({{{1, {0, 4}}}, {}});
    s[1].steps.push_back({{}, {{0, {0, 3}, Combine::Copy}}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), Catch::Contains("which sent 4"));
  }
  SECTION("a receive over a range being sent in the same step") {
    auto s = two(4);
    s[0].steps.push_back({{{1, {0, 2}}}, {{1, {1, 2}, Combine::Reduce}}});
    s[1].steps.push_back({{{0, {0, 2}}}, {{0, {2, 2}, Combine::Reduce}}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), Catch::Contains("overlaps a send"));
  }
  SECTION("a message nobody receives") {
    auto s = two(4);
    s[0].steps.push_back({{{1, {0, 4}}}, {}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), Catch::Contains("never received"));
  }
  SECTION("a reduction that counts a rank twice shows in the result") {
    auto s = all_ranks(3, 6, ring_all_reduce);
    for (auto& sched : s)
      for (auto& step : sched.steps)
        for (auto& t : step.recvs)
          t.combine = Combine::Reduce;  // the all-gather half must copy
    const auto result = simulate(s, own_contributions(3, 6));
    CHECK(result[0][0] != everyone(3));
  }
}
