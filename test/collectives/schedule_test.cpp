// Schedules, checked by symbolic execution: every rank must end with
// exactly the contributions it should (each rank's once, for a reduction).
#include <cmath>
#include <numeric>

#include "support/catch.hpp"

#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/cost.hpp>
#include <collie/collectives/ring.hpp>
#include <collie/collectives/schedule.hpp>
#include <collie/error.hpp>

using namespace collie::collectives;

namespace {

std::vector<std::size_t> counts_for(int world) {
  std::vector<std::size_t> counts = {0, 1, 101};  // 101: a prime, above 3 x 16 + 1
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
                                Schedule (*make)(const Shape&)) {
  std::vector<Schedule> s;
  for (int r = 0; r < world; ++r)
    s.push_back(make(Shape{r, world, count, 0, 1}));
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
    s[0].steps.push_back({{}, {{1, {0, 4}, Combine::Copy}}, {}});
    s[1].steps.push_back({{}, {{0, {0, 4}, Combine::Copy}}, {}});
    s[0].steps.push_back({{{1, {0, 4}}}, {}, {}});
    s[1].steps.push_back({{{0, {0, 4}}}, {}, {}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), ContainsSubstring("deadlock"));
  }
  SECTION("sizes that differ") {
    auto s = two(4);
    s[0].steps.push_back({{{1, {0, 4}}}, {}, {}});
    s[1].steps.push_back({{}, {{0, {0, 3}, Combine::Copy}}, {}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), ContainsSubstring("which sent 4"));
  }
  SECTION("two receives of one step over the same range") {
    auto s = two(4);
    s[0].steps.push_back({{{1, {0, 2}}, {1, {2, 2}}}, {}, {}});
    s[1].steps.push_back({{}, {{0, {0, 2}, Combine::Reduce}, {0, {1, 2}, Combine::Reduce}}, {}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), ContainsSubstring("overlap"));
  }
  SECTION("a send reads the buffer as the step began, even where a receive lands") {
    auto s = two(2);
    s[0].steps.push_back({{{1, {0, 2}}}, {{1, {0, 2}, Combine::Copy}}, {}});
    s[1].steps.push_back({{{0, {0, 2}}}, {{0, {0, 2}, Combine::Copy}}, {}});
    const auto result = simulate(s, own_contributions(2, 2));
    CHECK(result[0][0] == Contribution{1});
    CHECK(result[1][1] == Contribution{0});
  }
  SECTION("a local copy out of range") {
    auto s = two(4);
    Step st;
    st.copies.push_back({{0, 2}, {3, 2}});
    s[0].steps.push_back(st);
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), ContainsSubstring("outside a buffer"));
  }
  SECTION("a message nobody receives") {
    auto s = two(4);
    s[0].steps.push_back({{{1, {0, 4}}}, {}, {}});
    CHECK_THROWS_WITH(simulate(s, own_contributions(2, 4)), ContainsSubstring("never received"));
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

namespace {

std::vector<Schedule> schedules_for(Collective c, Algorithm a, int world, std::size_t count,
                                    int root, int pieces) {
  std::vector<Schedule> s;
  for (int r = 0; r < world; ++r)
    s.push_back(make_schedule(c, a, Shape{r, world, count, root, pieces}));
  return s;
}

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

}  // namespace

TEST_CASE("every algorithm of every collective, worlds 1 to 16, every root, counts 0, 1, "
          "below the world size and a prime: exactly the right contributions",
          "[schedule][exhaustive]") {
  std::size_t runs = 0;
  for (auto c : kCollectives) {
    for (auto a : algorithms_for(c)) {
      for (int world = 1; world <= 16; ++world) {
        for (std::size_t count : counts_for(world)) {
          // Every root for small counts; for the prime, the first, a middle and the last.
          std::vector<int> roots = {0};
          if (has_root(c)) {
            roots.clear();
            for (int r = 0; r < world; ++r)
              if (count < 101 || r == 0 || r == world / 2 || r == world - 1) roots.push_back(r);
          }
          // The chain algorithms cut the buffer into pieces: one, a few, more than elements.
          std::vector<int> pieces = {1};
          if (a == Algorithm::Ring && has_root(c)) pieces = {1, 3, 7};
          for (int root : roots) {
            for (int p : pieces) {
              INFO(collective_name(c) << " " << algorithm_name(a) << ": world " << world
                                      << ", count " << count << ", root " << root
                                      << ", pieces " << p);
              const auto s = schedules_for(c, a, world, count, root, p);
              const auto final_state = simulate(s, initial_state(c, world, count, root));
              REQUIRE_NOTHROW(check_final_state(c, world, count, root, final_state));
              ++runs;
            }
          }
        }
      }
    }
  }
  CHECK(runs > 5000);
}

TEST_CASE("a wrong schedule fails the final-state check", "[schedule]") {
  // Rank 2 copies where it should reduce, in its first reduce-scatter step.
  auto s = schedules_for(Collective::AllReduce, Algorithm::Ring, 4, 8, 0, 1);
  s[2].steps[0].recvs[0].combine = Combine::Copy;
  const auto state = simulate(s, initial_state(Collective::AllReduce, 4, 8, 0));
  CHECK_THROWS_WITH(check_final_state(Collective::AllReduce, 4, 8, 0, state),
                    ContainsSubstring("all_reduce: rank 0 element 2 holds {0,1,3}, expected {0,1,2,3}"));
  // A gather whose root never copies its own input.
  auto g = schedules_for(Collective::Gather, Algorithm::Linear, 3, 2, 1, 1);
  g[1].steps[0].copies.clear();
  const auto gathered = simulate(g, initial_state(Collective::Gather, 3, 2, 1));
  CHECK_THROWS_WITH(check_final_state(Collective::Gather, 3, 2, 1, gathered),
                    ContainsSubstring("rank 1 element 2 holds {}, expected {1}"));
}

TEST_CASE("costs: rounds and bytes each algorithm is known for", "[schedule]") {
  for (int world = 1; world <= 16; ++world) {
    const std::size_t count = 1024 * static_cast<std::size_t>(world);
    const auto n = static_cast<std::size_t>(world);
    const int log = ceil_log2(world);
    auto sent = [](const Schedule& s) {
      std::size_t total = 0;
      for (const auto& st : s.steps)
        for (const auto& t : st.sends) total += t.range.count;
      return total;
    };
    INFO("world " << world);
    for (int r = 0; r < world; ++r) {
      const Shape shape{r, world, count, 0, 1};
      // Binomial trees: at most ceil(log2 n) rounds each way.
      CHECK(static_cast<int>(make_schedule(Collective::Broadcast, Algorithm::Tree, shape)
                                 .steps.size()) <= log);
      CHECK(static_cast<int>(
                make_schedule(Collective::AllReduce, Algorithm::Tree, shape).steps.size()) <=
            2 * log);
      // Pairwise all-to-all and ring all-gather: (n - 1) blocks out.
      CHECK(sent(make_schedule(Collective::AllToAll, Algorithm::Pairwise, shape)) ==
            (n - 1) * count);
      CHECK(sent(make_schedule(Collective::AllGather, Algorithm::Ring, shape)) ==
            (n - 1) * count);
      CHECK(static_cast<int>(make_schedule(Collective::Barrier, Algorithm::Dissemination, shape)
                                 .steps.size()) == log);
    }
    // Rabenseifner on a power of two: each rank sends 2 (n - 1) / n of the
    // buffer in 2 log2 n rounds, like the ring in fewer rounds.
    if ((world & (world - 1)) == 0) {
      for (int r = 0; r < world; ++r) {
        const auto s = make_schedule(Collective::AllReduce, Algorithm::HalvingDoubling,
                                     Shape{r, world, count, 0, 1});
        CHECK(sent(s) == 2 * (n - 1) * count / n);
        CHECK(static_cast<int>(s.steps.size()) == 2 * log);
      }
    }
  }
}

TEST_CASE("names: collectives and algorithms parse back, unknown ones are listed", "[schedule]") {
  for (auto c : kCollectives) {
    CHECK(parse_collective(collective_name(c)) == c);
    for (auto a : algorithms_for(c))
      CHECK(parse_algorithm(algorithm_name(a)) == a);
  }
  CHECK(parse_collective("allreduce") == Collective::AllReduce);
  CHECK(parse_algorithm("halving-doubling") == Algorithm::HalvingDoubling);
  CHECK_FALSE(parse_collective("allreduse").has_value());
  CHECK_THROWS_WITH(make_schedule(Collective::Broadcast, Algorithm::Pairwise, Shape{0, 4, 8, 0, 1}),
                    "broadcast has no algorithm 'pairwise'; it has: tree, ring, two_level");
  CHECK_THROWS_WITH(make_schedule(Collective::Scatter, Algorithm::Tree, Shape{0, 4, 8, 4, 1}),
                    "scatter: root 4 is outside a world of 4 (ranks 0 to 3)");
}

TEST_CASE("cost model: the ring's textbook time, trees for small buffers, rings for large",
          "[schedule][cost]") {
  CostModel m;
  m.delta = 0;
  for (int n : {2, 3, 4, 5, 8}) {
    const std::size_t count = 1200 * static_cast<std::size_t>(n);  // divisible chunks
    const double N = static_cast<double>(count * 4);
    const auto ring = estimate(Collective::AllReduce, Algorithm::Ring, Shape{0, n, count, 0, 1},
                               4, m);
    const double textbook = 2 * (n - 1) * (m.alpha + N / n * m.beta) + (n - 1) * N / n * m.gamma;
    CHECK(ring.seconds == Approx(textbook).epsilon(1e-9));
    CHECK(ring.steps == static_cast<std::size_t>(2 * (n - 1)));
  }
  auto best = [&](Collective c, int n, std::size_t count, int pieces) {
    Algorithm winner = Algorithm::Auto;
    double t = 1e30;
    for (auto a : algorithms_for(c)) {
      const double s = estimate(c, a, Shape{0, n, count, 0, pieces}, 4, CostModel{}).seconds;
      if (s < t) {
        t = s;
        winner = a;
      }
    }
    return winner;
  };
  for (int n : {3, 5, 8}) {
    INFO("world " << n);
    CHECK(best(Collective::Broadcast, n, 1, 1) == Algorithm::Tree);
    CHECK(best(Collective::Broadcast, n, 16 << 20, 256) == Algorithm::Ring);
    CHECK(best(Collective::AllReduce, n, 1, 1) == Algorithm::RecursiveDoubling);
    const auto large = best(Collective::AllReduce, n, 16 << 20, 1);
    CHECK((large == Algorithm::Ring || large == Algorithm::HalvingDoubling));
  }
}

TEST_CASE("cost model: a crowded host bounds the time by its ranks' work", "[schedule][cost]") {
  CostModel m;
  // The cache terms apart (the next test case): the work alone.
  m.work_per_warm_byte = m.work_per_cold_byte = 0;
  const int n = 4;
  const std::size_t segment = m.segment_bytes;
  for (std::size_t count : {std::size_t{4}, std::size_t{16384}, std::size_t{4} << 20}) {
    INFO("count " << count);
    const Shape shape{0, n, count, 0, 1};
    const auto alone = estimate(Collective::AllReduce, Algorithm::Ring, shape, 4, m);
    // Each ring rank sends and receives 2 (n-1) chunks of N/n bytes and
    // reduces n-1 of them, cut into segments.
    const double N = static_cast<double>(count * 4), chunk = N / n;
    const double segments =
        2.0 * 2 * (n - 1) * std::max(1.0, std::ceil(chunk / static_cast<double>(segment)));
    const double work = segments * m.work_per_segment +
                        2.0 * 2 * (n - 1) * chunk * m.work_per_byte + (n - 1) * chunk * m.gamma;
    for (double crowding : {0.5, 1.0, 1.5, 2.0, 4.0}) {
      CostModel c = m;
      c.crowding = crowding;
      const auto crowded = estimate(Collective::AllReduce, Algorithm::Ring, shape, 4, c);
      const double expected =
          crowding > 1 ? std::max(alone.seconds, work * crowding) : alone.seconds;
      CHECK(crowded.seconds == Approx(expected).epsilon(1e-9));
    }
  }
  // Crowded, the clock follows the bytes as the executor moves them, so the
  // tree's four steps overlap: on 16 MiB it costs the ring's work, not its
  // four messages one after another.
  CostModel crowded = m;
  crowded.crowding = 2;
  const Shape big{0, n, std::size_t{4} << 20, 0, pieces_for(16 << 20, segment)};
  const auto tree_alone = estimate(Collective::AllReduce, Algorithm::Tree, big, 4, m);
  const auto tree = estimate(Collective::AllReduce, Algorithm::Tree, big, 4, crowded);
  const auto ring = estimate(Collective::AllReduce, Algorithm::Ring, big, 4, crowded);
  CHECK(tree.seconds < 0.8 * tree_alone.seconds);
  CHECK(tree.seconds == Approx(ring.seconds).epsilon(1e-9));
}

TEST_CASE("cost model: a crowded host pays for the bytes that miss the cache",
          "[schedule][cost]") {
  // 2 ranks, 16 MiB each, sharing an 8 MiB cache (4 MiB each): what each
  // rank touches again only after more than that has gone by comes from
  // memory, and so does its first touch of its buffer.
  CostModel m;
  m.crowding = 2;
  m.cache_bytes = 8 << 20;
  m.work_per_warm_byte = m.work_per_cold_byte = 0;
  const std::size_t count = std::size_t{4} << 20;
  const double N = static_cast<double>(count * 4);
  const Shape shape{0, 2, count, 0, pieces_for(count * 4, m.segment_bytes)};
  // Seconds per rank per byte from memory, where the bound decides.
  const auto cold = [&](Algorithm a) {
    CostModel c = m;
    c.work_per_cold_byte = 1e-9;
    const double base = estimate(Collective::AllReduce, a, shape, 4, m).seconds;
    return (estimate(Collective::AllReduce, a, shape, 4, c).seconds - base) / 1e-9 / m.crowding;
  };
  // The ring sends half A and reduces half B into its buffer, then sends
  // B and receives A: each half comes back after the whole buffer has
  // gone by (one connection carries both steps, in order). All 2N bytes
  // are cold.
  CHECK(cold(Algorithm::Ring) == Approx(2 * N).epsilon(1e-9));
  // The tree: the leaf sends its buffer and gets each piece back reduced
  // within the sockets' window; the root reduces into its buffer and
  // sends each piece on at once. Only the two first touches are cold: N a rank.
  CHECK(cold(Algorithm::Tree) == Approx(N).epsilon(1e-9));
  // A buffer within the cache's share: nothing is cold, nothing is added.
  const Shape small{0, 2, std::size_t{256} << 10, 0, pieces_for(1 << 20, m.segment_bytes)};
  CostModel c = m;
  c.work_per_cold_byte = 1e-9;
  c.work_per_warm_byte = 1e-9;
  c.core_cache_bytes = 8 << 20;
  for (auto a : algorithms_for(Collective::AllReduce))
    CHECK(estimate(Collective::AllReduce, a, small, 4, c).seconds ==
          estimate(Collective::AllReduce, a, small, 4, m).seconds);
  // A core per rank: no bound, no cache terms.
  CostModel alone = c;
  alone.crowding = 1;
  CostModel plain = m;
  plain.crowding = 1;
  for (auto a : algorithms_for(Collective::AllReduce))
    CHECK(estimate(Collective::AllReduce, a, shape, 4, alone).seconds ==
          estimate(Collective::AllReduce, a, shape, 4, plain).seconds);
}

TEST_CASE("cost model: the crowded replay runs every all_reduce to the end", "[schedule][cost]") {
  // flow() throws, naming the algorithm and the op it stalled on, if its
  // piece-by-piece replay cannot finish; every algorithm, world and size
  // here must finish, and cost at least its uncrowded latency terms.
  CostModel m;
  m.crowding = 2;
  for (int n = 1; n <= 9; ++n)
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{1000},
                              std::size_t{1} << 20})
      for (auto a : algorithms_for(Collective::AllReduce)) {
        INFO(n << " ranks, count " << count << ", " << algorithm_name(a));
        const Shape shape{0, n, count, 0, pieces_for(count * 4, m.segment_bytes)};
        Cost cost;
        REQUIRE_NOTHROW(cost = estimate(Collective::AllReduce, a, shape, 4, m));
        CostModel latency = m;
        latency.crowding = 1;
        latency.beta = latency.gamma = 0;
        const double floor = estimate(Collective::AllReduce, a, shape, 4, latency).seconds;
        CHECK(cost.seconds >= floor * 0.999);
      }
}

TEST_CASE("cost model: what Auto picks for all_reduce, crowded or not", "[schedule][cost]") {
  const CostModel m;
  const int n = 4;
  const std::size_t segment = m.segment_bytes;
  // What the crowded model buys on 4 ranks on 2 cores (docs/PERFORMANCE.md,
  // fitted with collie_fit_cost): the tree, which leaves half the ranks
  // idle, where messages cost most; halving-doubling, with fewer segments
  // than the ring, in the middle; the ring, level with the tree, at 1 MiB;
  // and from 4 MiB the tree again, whose overlapped steps touch each byte
  // while it is in the cache. A core per rank keeps the uncrowded picks.
  CostModel crowded = m;
  crowded.crowding = 2;
  const auto pick = [&](std::size_t bytes, const CostModel& model) {
    return auto_algorithm(Collective::AllReduce, n, bytes / 4, 4, segment, model);
  };
  for (std::size_t bytes : {std::size_t{16} << 10, std::size_t{64} << 10, std::size_t{4} << 20,
                            std::size_t{16} << 20, std::size_t{64} << 20})
    CHECK(pick(bytes, crowded) == Algorithm::Tree);
  CHECK(pick(256 << 10, crowded) == Algorithm::HalvingDoubling);
  CHECK(pick(1 << 20, crowded) == Algorithm::Ring);
  CHECK(pick(64 << 10, m) != Algorithm::Tree);
  CHECK(pick(16 << 20, m) == Algorithm::HalvingDoubling);
  // Shared memory (measured, docs/PERFORMANCE.md): on 4 ranks on 2 cores a
  // step costs a switch between processes, so recursive doubling's 2 steps
  // beat the tree's 4 for small buffers; halving-doubling in the middle;
  // the ring for large ones. With a core per rank, 2 ranks: recursive
  // doubling, then the ring.
  const auto shm = shared_memory_cost_model(2);
  for (std::size_t bytes : {std::size_t{8}, std::size_t{512}, std::size_t{16} << 10})
    CHECK(pick(bytes, shm) == Algorithm::RecursiveDoubling);
  for (std::size_t bytes : {std::size_t{32} << 10, std::size_t{512} << 10})
    CHECK(pick(bytes, shm) == Algorithm::HalvingDoubling);
  for (std::size_t bytes : {std::size_t{2} << 20, std::size_t{64} << 20})
    CHECK(pick(bytes, shm) == Algorithm::Ring);
  CHECK(pick(8, crowded) == Algorithm::Tree);  // TCP, for contrast
  const auto shm2 = shared_memory_cost_model(1);
  CHECK(shm2.alpha < shm.alpha);
  for (std::size_t bytes : {std::size_t{8}, std::size_t{32} << 10})
    CHECK(auto_algorithm(Collective::AllReduce, 2, bytes / 4, 4, segment, shm2) ==
          Algorithm::RecursiveDoubling);
  for (std::size_t bytes : {std::size_t{128} << 10, std::size_t{64} << 20})
    CHECK(auto_algorithm(Collective::AllReduce, 2, bytes / 4, 4, segment, shm2) == Algorithm::Ring);
  // Fitted to all_reduce alone: the other collectives cost the same crowded.
  for (auto c : {Collective::ReduceScatter, Collective::AllGather, Collective::Broadcast}) {
    for (auto a : algorithms_for(c)) {
      const Shape shape{0, n, std::size_t{1} << 16, 0, 4};
      CHECK(estimate(c, a, shape, 4, crowded).seconds == estimate(c, a, shape, 4, m).seconds);
    }
  }
}
