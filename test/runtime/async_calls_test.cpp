// Several async collectives of one group in flight (COLLIE_ASYNC_CALLS,
// group.hpp): a small call behind a large one does not wait for it, every
// result stays right (every element checked) whatever runs beside it, and
// with one at a time the calls end in call order as before.
#include <cstdint>
#include <span>
#include <vector>

#include "support/catch.hpp"

#include <collie/process_group.hpp>

#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;

namespace {

// Rank r's element i of call k: small integers, exact in float32 sums.
float value(int rank, std::size_t k, std::size_t i) {
  return static_cast<float>(rank + 1 + static_cast<int>(k % 5) + static_cast<int>(i % 3));
}

float sum_over(int world, std::size_t k, std::size_t i) {
  float s = 0;
  for (int r = 0; r < world; ++r)
    s += value(r, k, i);
  return s;
}

// Posts a large all_reduce, then a small one, waits for the small one and
// says whether the large one had ended by then; checks both results.
bool large_done_when_small_ends(collie::ProcessGroup& pg, std::size_t k) {
  std::vector<float> large(std::size_t{1} << 20), small(16);  // 4 MiB, 64 B
  for (std::size_t i = 0; i < large.size(); ++i)
    large[i] = value(pg.rank(), k, i);
  for (std::size_t i = 0; i < small.size(); ++i)
    small[i] = value(pg.rank(), k + 1, i);
  auto l = pg.all_reduce_async(std::span(large));
  auto s = pg.all_reduce_async(std::span(small));
  s.wait();
  const bool large_done = l.is_completed();
  l.wait();
  for (std::size_t i = 0; i < small.size(); ++i)
    expect(small[i] == sum_over(pg.size(), k + 1, i), "small result");
  for (std::size_t i = 0; i < large.size(); ++i) {
    if (large[i] != sum_over(pg.size(), k, i)) expect(false, "large result at " + std::to_string(i));
  }
  return large_done;
}

}  // namespace

TEST_CASE("async calls: a small call behind a large one ends first (two at once), and only "
          "after it with one at a time",
          "[collective][async]") {
  constexpr int kTries = 5;
  for (int calls : {2, 1}) {
    INFO("COLLIE_ASYNC_CALLS " << calls);
    std::vector<int> overtaken(4, 0);  // per rank: tries where the small one ended first
    collie::test::run_ranks(
        4,
        [&](collie::ProcessGroup& pg) {
          for (int t = 0; t < kTries; ++t) {
            if (!large_done_when_small_ends(pg, static_cast<std::size_t>(2 * t)))
              ++overtaken[static_cast<std::size_t>(pg.rank())];
          }
        },
        120s, [&](collie::InitOptions& o) { o.async_calls = calls; });
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r);
      // One at a time, the small one starts only once the large one ended;
      // two at once, it has its own queue and ends while the large one
      // (4 MiB against 64 B) still runs, in some try at least.
      if (calls == 1) CHECK(overtaken[static_cast<std::size_t>(r)] == 0);
      else CHECK(overtaken[static_cast<std::size_t>(r)] > 0);
    }
  }
}

TEST_CASE("async calls: mixed sizes and collectives in flight on 3 and 5 ranks, with blocking "
          "calls between, every element right",
          "[collective][async]") {
  for (int world : {1, 3, 5}) {
    INFO(world << " ranks");
    collie::test::run_ranks(world, [](collie::ProcessGroup& pg) {
      const int n = pg.size();
      // Sizes across the small queue's edge (64 KiB) and below the world
      // size; all_reduces, all_gathers, broadcasts and barriers.
      const std::vector<std::size_t> counts{0, 1, 3, 16384, 16385, 1 << 18, 7, 1 << 16, 2};
      std::vector<std::vector<float>> in(counts.size()), out(counts.size());
      std::vector<collie::Work> works;
      for (std::size_t k = 0; k < counts.size(); ++k) {
        in[k].resize(counts[k]);
        for (std::size_t i = 0; i < counts[k]; ++i)
          in[k][i] = value(pg.rank(), k, i);
        switch (k % 3) {
          case 0:
            works.push_back(pg.all_reduce_async(std::span(in[k])));
            break;
          case 1:
            out[k].resize(counts[k] * static_cast<std::size_t>(n));
            works.push_back(pg.all_gather_async(std::span<const float>(in[k]), std::span(out[k])));
            break;
          default:
            works.push_back(pg.broadcast_async(std::span(in[k]), static_cast<int>(k) % n));
            break;
        }
        if (k % 4 == 3) works.push_back(pg.barrier_async());
        if (k == 4) pg.barrier();  // a blocking call among them
      }
      for (auto it = works.rbegin(); it != works.rend(); ++it)
        it->wait();  // the last first: each Work ends on its own
      for (std::size_t k = 0; k < counts.size(); ++k) {
        for (std::size_t i = 0; i < counts[k]; ++i) {
          switch (k % 3) {
            case 0:
              expect(in[k][i] == sum_over(n, k, i), "all_reduce " + std::to_string(k));
              break;
            case 1:
              for (int r = 0; r < n; ++r)
                expect(out[k][static_cast<std::size_t>(r) * counts[k] + i] == value(r, k, i),
                       "all_gather " + std::to_string(k));
              break;
            default:
              expect(in[k][i] == value(static_cast<int>(k) % n, k, i),
                     "broadcast " + std::to_string(k));
              break;
          }
        }
      }
    });
  }
}
