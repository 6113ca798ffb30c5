// Collectives with the ranks as threads of this process (file:// store):
// every collective and algorithm on small worlds, checked element by element
// by tools/check/collective_check; sub-groups, concurrent async collectives,
// mismatches and argument errors. (The full dtype x op matrix runs across
// processes, in collective_launch_test.cpp.)
#include <future>
#include <numeric>
#include <thread>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/collectives/cost.hpp>
#include <collie/process_group.hpp>
#include <collie/store/file_store.hpp>

#include "collective_check.hpp"
#include "group/placement.hpp"
#include "support/shm_skip.hpp"
#include "support/forgetful_store.hpp"
#include "support/scratch_dir.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;

namespace {

// 1 KiB segments: several per message at modest counts.
void run_ranks(int world, const std::function<void(collie::ProcessGroup&)>& body,
               std::chrono::milliseconds timeout = 60s) {
  collie::test::run_ranks(world, body, timeout,
                          [](collie::InitOptions& o) { o.segment_bytes = 1024; });
}

void run_cases(collie::ProcessGroup& pg, const std::vector<collie::check::CollectiveCase>& cases) {
  for (const auto& c : cases) {
    std::string first;
    std::size_t wrong = 0;
    try {
      wrong = collie::check::run_and_check(pg, c, first);
    } catch (const std::exception& e) {
      throw std::runtime_error(collie::check::describe(c) + ": " + e.what());
    }
    expect(wrong == 0, fmt::format("{}: {} wrong; first: {}", collie::check::describe(c), wrong, first));
  }
}

}  // namespace

TEST_CASE("every collective and algorithm, worlds 1 to 5, in one process", "[collective]") {
  for (int world = 1; world <= 5; ++world) {
    INFO("world " << world);
    const auto cases = collie::check::matrix(world, false);
    REQUIRE(cases.size() > 100);
    run_ranks(world, [&](collie::ProcessGroup& pg) { run_cases(pg, cases); });
  }
}

TEST_CASE("every collective and algorithm on 12 ranks: shared memory's ready words",
          "[collective]") {
  // Past 8 ranks a host, a sender marks its bit in the receiver's mailbox
  // and waits read those words, not every ring (transport.md).
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  const auto cases = collie::check::matrix(12, false);
  REQUIRE(cases.size() > 100);
  collie::test::run_ranks(
      12, [&](collie::ProcessGroup& pg) { run_cases(pg, cases); }, 120s,
      [](collie::InitOptions& o) {
        o.segment_bytes = 1024;
        o.transport = "shm";
      });
}

TEST_CASE("sub-groups: own numbering, own tags, and a clear error outside", "[collective]") {
  run_ranks(5, [](collie::ProcessGroup& world) {
    // Odd and even ranks, the odd ones in reverse order.
    auto evens = world.new_group({0, 2, 4});
    auto odds = world.new_group({3, 1});
    auto& mine = world.rank() % 2 == 0 ? evens : odds;
    auto& other = world.rank() % 2 == 0 ? odds : evens;
    expect(mine.size() == (world.rank() % 2 == 0 ? 3 : 2), "size");
    const int expected_rank = world.rank() % 2 == 0 ? world.rank() / 2 : (world.rank() == 3 ? 0 : 1);
    expect(mine.rank() == expected_rank, "rank in group");
    expect(other.rank() == -1, "not a member");
    std::vector<std::int64_t> v(10, world.rank());
    // Both groups and the world at once, async: tags keep them apart.
    std::vector<std::int64_t> w(10, 1);
    auto a = mine.all_reduce_async(std::span(v));
    auto b = world.all_reduce_async(std::span(w));
    a.wait();
    b.wait();
    const std::int64_t sum = world.rank() % 2 == 0 ? 0 + 2 + 4 : 1 + 3;
    for (auto x : v) expect(x == sum, "group sum");
    for (auto x : w) expect(x == 5, "world sum");
    // Point to point inside the group, in its numbering.
    if (&mine == &odds) {
      std::vector<int> msg(3, world.rank());
      if (mine.rank() == 0) mine.send(std::span(msg), 1, 7);
      else {
        mine.recv(std::span(msg), 0, 7);
        expect(msg[0] == 3, "group rank 0 is world rank 3");
      }
    }
    try {
      other.barrier();
      expect(false, "a non-member used the group");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("which it is not a member of") != std::string::npos,
             e.what());
    }
    // A group of one, and a nested group.
    auto alone = world.new_group({world.rank()});
    (void)alone;  // every rank makes the same number of calls: each its own
    auto nested = mine.new_group({0});
    if (mine.rank() == 0) {
      std::vector<float> f(4, 2.5f);
      nested.all_reduce(std::span(f), collie::ReduceOp::Max);
      expect(f[3] == 2.5f, "group of one");
    }
  });
}

TEST_CASE("many async collectives in flight complete in order and correctly", "[collective]") {
  run_ranks(4, [](collie::ProcessGroup& pg) {
    std::vector<std::vector<float>> bufs(12, std::vector<float>(3000));
    std::vector<std::vector<float>> gathered(12, std::vector<float>(4 * 3000));
    std::vector<collie::Work> works;
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      std::fill(bufs[i].begin(), bufs[i].end(), static_cast<float>(pg.rank() + i));
      if (i % 3 == 2)
        works.push_back(pg.all_gather_async(std::span<const float>(bufs[i]), std::span(gathered[i])));
      else
        works.push_back(pg.all_reduce_async(std::span(bufs[i])));
    }
    // A blocking collective in between: it has its own sequence number.
    pg.barrier();
    for (auto& w : works) w.wait();
    for (std::size_t i = 0; i < bufs.size(); ++i) {
      if (i % 3 == 2) {
        for (std::size_t j = 0; j < gathered[i].size(); ++j)
          expect(gathered[i][j] == static_cast<float>(j / 3000 + i), "gathered");
      } else {
        for (auto x : bufs[i]) expect(x == static_cast<float>(6 + 4 * i), "reduced");
      }
    }
  });
}

TEST_CASE("two live sub-groups never share a tag space, not even where a hash of their "
          "places would",
          "[collective]") {
  // Until new_group agreed on its tag spaces, a group's came from a hash of
  // its parent's and its index among the parent's children, modulo 2^23 - 1:
  // the world's 345th and 4525th children landed on the same one, and a
  // receive on one took the other's message. Both live here, each sending
  // under tag 0 at once; every message must reach its own group.
  constexpr int kFirst = 345, kSecond = 4525;
  run_ranks(2, [](collie::ProcessGroup& world) {
    std::vector<collie::ProcessGroup> kept;
    for (int index = 1; index <= kSecond; ++index) {
      auto g = world.new_group({0, 1});
      if (index == kFirst || index == kSecond) kept.push_back(std::move(g));
    }
    auto& first = kept[0];
    auto& second = kept[1];
    std::vector<int> a(64, 111), b(64, 222), got_a(64, 0), got_b(64, 0);
    if (world.rank() == 0) {
      first.send(std::span(a), 1, 0);
      second.send(std::span(b), 1, 0);
    } else {
      // The second group's receive first: the first group's message came
      // first, and must not be the one it takes.
      auto rb = second.irecv(std::span(got_b), 0, 0);
      auto ra = first.irecv(std::span(got_a), 0, 0);
      rb.wait();
      ra.wait();
      expect(got_b == b, "the second group's receive took the second group's message");
      expect(got_a == a, "the first group's receive took the first group's message");
    }
    // Their collectives, at once, keep apart too.
    std::vector<std::int64_t> x(8, world.rank() + 1), y(8, 10 * (world.rank() + 1));
    auto wx = first.all_reduce_async(std::span(x));
    auto wy = second.all_reduce_async(std::span(y));
    wx.wait();
    wy.wait();
    expect(x == std::vector<std::int64_t>(8, 3) && y == std::vector<std::int64_t>(8, 30),
           "the two groups' all_reduces");
  });
}

TEST_CASE("new_group without every rank fails naming new_group, not a bare all_reduce",
          "[collective]") {
  try {
    run_ranks(
        2,
        [](collie::ProcessGroup& world) {
          if (world.rank() == 0) world.new_group({0, 1});
        },
        std::chrono::milliseconds(1500));
    FAIL("new_group completed without rank 1");
  } catch (const collie::Error& e) {
    // Rank 0 times out, or hears that rank 1 left: either way it says why.
    CHECK_THAT(e.what(), ContainsSubstring("rank 0: new_group on world") &&
                             ContainsSubstring("every rank of world must call new_group"));
  }
}

TEST_CASE("out-of-place all_reduce and reduce have async forms, as do the untyped calls",
          "[collective]") {
  for (int world : {1, 3}) {
    INFO("world " << world);
    run_ranks(world, [world](collie::ProcessGroup& pg) {
      const int r = pg.rank();
      const std::vector<double> in = {1.0 + r, 10.0 * (r + 1), -0.5 * r};
      std::vector<double> sum(3, -1), at_root(3, -1), untyped(3, -1), kept = in;
      auto a = pg.all_reduce_async(std::span<const double>(in), std::span(sum));
      auto b = pg.reduce_async(std::span<const double>(in), std::span(at_root), world - 1,
                               collie::ReduceOp::Max);
      auto c = pg.run_collective_async(collie::Collective::AllReduce, collie::DataType::Float64,
                                       in.data(), untyped.data(), in.size(),
                                       collie::ReduceOp::Min);
      a.wait();
      b.wait();
      c.wait();
      double s0 = 0, s1 = 0, s2 = 0;
      for (int q = 0; q < world; ++q) {
        s0 += 1.0 + q;
        s1 += 10.0 * (q + 1);
        s2 += -0.5 * q;
      }
      expect(sum == std::vector<double>{s0, s1, s2}, "all_reduce_async out of place");
      expect(in == kept, "the input is left as it was");
      if (r == world - 1)
        expect(at_root == std::vector<double>{static_cast<double>(world), 10.0 * world, 0.0},
               "reduce_async out of place, at the root");
      else
        expect(at_root == std::vector<double>(3, -1), "reduce_async leaves a non-root's output");
      expect(untyped == std::vector<double>{1.0, 10.0, -0.5 * (world - 1)},
             "run_collective_async");
      std::vector<std::size_t> counts(static_cast<std::size_t>(world), 1);
      std::vector<double> gathered(static_cast<std::size_t>(world), -1);
      const std::size_t own = 1;
      pg.run_vector_collective(collie::Collective::AllGather, collie::DataType::Float64,
                               in.data(), std::span(&own, 1), gathered.data(), counts);
      for (int q = 0; q < world; ++q)
        expect(gathered[static_cast<std::size_t>(q)] == 1.0 + q, "run_vector_collective");
      // all_to_all_v_async: rank r sends j + 1 elements to rank j, each
      // worth 100 r + j; it receives r + 1 from each.
      std::vector<std::size_t> send(static_cast<std::size_t>(world)), recv(send.size());
      std::vector<std::int32_t> out, into;
      for (int j = 0; j < world; ++j) {
        send[static_cast<std::size_t>(j)] = static_cast<std::size_t>(j + 1);
        recv[static_cast<std::size_t>(j)] = static_cast<std::size_t>(r + 1);
        out.insert(out.end(), static_cast<std::size_t>(j + 1), 100 * r + j);
      }
      into.assign(static_cast<std::size_t>(world * (r + 1)), -1);
      auto v = pg.all_to_all_v_async(std::span<const std::int32_t>(out), send, std::span(into), recv);
      v.wait();
      for (int j = 0; j < world; ++j)
        for (int k = 0; k <= r; ++k)
          expect(into[static_cast<std::size_t>(j * (r + 1) + k)] == 100 * j + r,
                 "all_to_all_v_async");
    });
  }
}

TEST_CASE("every rank names both calls of a mismatch, also when the store lost the diagnosis",
          "[collective]") {
  // Ranks that never receive from the odd rank hear of the mismatch from
  // one that did, and read its diagnosis in the store; where the store is
  // gone by then (rank 0 hosted it and exited), they read the odd rank's
  // call that the finder sent along. Here the store forgets every
  // diagnosis: the second way alone must name both calls, on every rank.
  collie::test::ScratchDir dir;
  auto shared = std::make_shared<collie::store::FileStore>((dir.path() / "store").string());
  auto forgetful = std::make_shared<collie::test::ForgetfulStore>(shared, "mismatch/");
  std::vector<std::string> said(4);
  collie::test::run_ranks(
      4,
      [&](collie::ProcessGroup& pg) {
        std::vector<float> v(4000 + (pg.rank() == 3 ? 1 : 0), 1.0f);
        collie::CollectiveOptions o;
        o.algorithm = collie::Algorithm::Ring;  // ranks 1 and 3 never meet
        try {
          pg.all_reduce(std::span(v), collie::ReduceOp::Sum, o);
        } catch (const collie::MismatchError& e) {
          said[static_cast<std::size_t>(pg.rank())] = e.what();
        }
      },
      std::chrono::seconds(30), [&](collie::InitOptions& o) {
        o.store = forgetful;
        o.store_name = "forgetful";
      });
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << " said: " << said[static_cast<std::size_t>(r)]);
    CHECK_THAT(said[static_cast<std::size_t>(r)],
               ContainsSubstring("all_reduce(float32, 4001, sum)") &&
                   ContainsSubstring("all_reduce(float32, 4000, sum)"));
  }
}

TEST_CASE("mismatched collectives raise MismatchError naming both calls", "[collective]") {
  std::vector<std::string> messages(2);
  run_ranks(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(1024, 1.0f);
    try {
      if (pg.rank() == 0)
        pg.all_reduce(std::span(v));
      else
        pg.broadcast(std::span(v), 0);
      throw std::runtime_error("no mismatch seen");
    } catch (const collie::MismatchError& e) {
      messages[static_cast<std::size_t>(pg.rank())] = e.what();
    }
    // The group is unusable afterwards, and says why.
    try {
      pg.barrier();
      throw std::runtime_error("a broken group ran a barrier");
    } catch (const collie::Error& e) {
      expect(std::string(e.what()).find("unusable since an earlier collective failed") !=
                 std::string::npos,
             e.what());
    }
  }, 20s);
  CHECK_THAT(messages[1], ContainsSubstring("rank 0 called all_reduce(float32, 1024, sum) but rank 1 "
                                          "called broadcast(float32, 1024, root=0)"));
  CHECK_THAT(messages[0], ContainsSubstring("rank 1 called broadcast(float32, 1024, root=0) but "
                                          "rank 0 called all_reduce(float32, 1024, sum)"));
}

TEST_CASE("mismatched counts, dtypes, roots and forced algorithms are caught", "[collective]") {
  struct Variant {
    const char* what;
    std::function<void(collie::ProcessGroup&)> call;
    const char* expected;
  };
  const std::vector<Variant> variants = {
      {"count",
       [](collie::ProcessGroup& pg) {
         std::vector<std::int32_t> v(pg.rank() == 0 ? 100 : 101);
         pg.all_reduce(std::span(v));
       },
       "all_reduce(int32, 101, sum) but rank"},
      {"dtype",
       [](collie::ProcessGroup& pg) {
         if (pg.rank() == 0) {
           std::vector<float> v(64);
           pg.all_reduce(std::span(v));
         } else {
           std::vector<std::int32_t> v(64);
           pg.all_reduce(std::span(v));
         }
       },
       "all_reduce(int32, 64, sum)"},
      {"root",
       [](collie::ProcessGroup& pg) {
         std::vector<double> v(64);
         pg.broadcast(std::span(v), pg.rank() == 2 ? 1 : 0);
       },
       "root=1"},
      {"algorithm",
       [](collie::ProcessGroup& pg) {
         std::vector<double> v(300);
         collie::CollectiveOptions o;
         o.algorithm = pg.rank() == 0 ? collie::Algorithm::Ring : collie::Algorithm::Tree;
         pg.all_reduce(std::span(v), collie::ReduceOp::Sum, o);
       },
       "with ring"},
  };
  for (const auto& v : variants) {
    INFO(v.what);
    std::atomic<int> caught{0};
    std::vector<std::string> messages(3), others(3);
    run_ranks(3, [&](collie::ProcessGroup& pg) {
      try {
        v.call(pg);
      } catch (const collie::MismatchError& e) {
        messages[static_cast<std::size_t>(pg.rank())] = e.what();
        ++caught;
      } catch (const collie::Error& e) {
        // Ranks not next to the mismatch may fail otherwise (timeout).
        others[static_cast<std::size_t>(pg.rank())] = e.what();
      }
    }, 5s);
    INFO(others[0] << "\n" << others[1] << "\n" << others[2]);
    CHECK(caught >= 1);
    CHECK_THAT(messages[0] + messages[1] + messages[2], ContainsSubstring(v.expected));
  }
}

TEST_CASE("collective argument errors say what is wrong, before any message moves",
          "[collective]") {
  run_ranks(2, [](collie::ProcessGroup& pg) {
    auto message = [&](const std::function<void()>& f) -> std::string {
      try {
        f();
      } catch (const collie::Error& e) {
        return e.what();
      }
      return "no error";
    };
    std::vector<float> a(10), b(7), c(20);
    auto has = [](const std::string& s, const char* part) {
      expect(s.find(part) != std::string::npos, s + " lacks: " + part);
    };
    has(message([&] { pg.all_reduce(std::span<const float>(a), std::span(b)); }),
        "the output has 7 elements, the input 10");
    has(message([&] { pg.all_gather(std::span<const float>(a), std::span(b)); }),
        "a buffer of 7 elements for 2 ranks of 10: it must hold 2 x 10 = 20");
    has(message([&] { pg.broadcast(std::span(a), 2); }), "root 2 is not a rank of world (ranks 0 to 1)");
    has(message([&] { pg.all_reduce(std::span(a), collie::ReduceOp::BitwiseAnd); }),
        "reduce op band is not defined on float32");
    collie::CollectiveOptions o;
    o.algorithm = collie::Algorithm::Pairwise;
    has(message([&] { pg.all_reduce(std::span(a), collie::ReduceOp::Sum, o); }),
        "all_reduce has no algorithm 'pairwise'; it has: ring, halving_doubling, "
        "recursive_doubling, tree");
    has(message([&] { pg.all_to_all(std::span<const float>(b), std::span(b)); }),
        "both must hold 2 equal blocks");
    has(message([&] { pg.all_reduce_async(std::span<const float>(a), std::span(b)); }),
        "the output has 7 elements, the input 10");
    has(message([&] { pg.reduce_scatter(std::span<const float>(b), std::span(a)); }),
        "a buffer of 7 elements for 2 ranks of 10: it must hold 2 x 10 = 20");
    // A rooted collective's buffer of every rank's blocks is checked at the
    // root (elsewhere it is ignored).
    if (pg.rank() == 0) {
      has(message([&] { pg.reduce(std::span<const float>(a), std::span(b), 0); }),
          "reduce: the output has 7 elements, the input 10");
      has(message([&] { pg.gather_async(std::span<const float>(a), std::span(b), 0); }),
          "gather: a buffer of 7 elements for 2 ranks of 10");
      has(message([&] { pg.scatter(std::span<const float>(b), std::span(a), 0); }),
          "scatter: a buffer of 7 elements for 2 ranks of 10");
    }
    // Nothing moved: the group still works.
    pg.all_reduce(std::span(c));
  });
}

TEST_CASE("Auto counts the ranks that share a machine's cores, alike on every rank",
          "[collective]") {
  CHECK(collie::crowding(4, 2, 4) == 2.0);
  CHECK(collie::crowding(4, 2, 2) == 1.0);  // a group of 2 of them
  CHECK(collie::crowding(1, 8, 4) == 0.125);
  CHECK(collie::crowding(3, 0, 3) == 3.0);  // no cores read: 1
  const int cores = collie::usable_cores();
  CHECK(cores >= 1);
  CHECK(cores <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  CHECK(collie::machine_id() == collie::machine_id());
  // Ranks as threads of one process: all on this machine. Every rank
  // picks what the model of its transport (shared memory's when the whole
  // group shares it, collectives/cost.hpp) with this machine's crowding
  // picks, for the world and for a group of two.
  const std::string transport = GENERATE(as<std::string>{}, "tcp", "shm");
  COLLIE_SKIP_WITHOUT_SHM(transport);
  const auto model_of = [&](double crowding) {
    if (transport == "shm") return collie::collectives::shared_memory_cost_model(crowding);
    collie::collectives::CostModel m;
    m.crowding = crowding;
    // TCP's model takes this machine's caches, as the ranks' does.
    const auto caches = collie::cache_sizes();
    if (caches.core > 0) m.core_cache_bytes = caches.core;
    if (caches.host > 0) m.cache_bytes = caches.host;
    return m;
  };
  for (int world : {3, 4}) {
    INFO("world " << world << ", " << transport);
    std::vector<std::vector<collie::Algorithm>> picks(static_cast<std::size_t>(world));
    const std::vector<std::size_t> sizes = {64, 64 << 10, 256 << 10, 1 << 20, 16 << 20};
    const std::size_t segment = std::size_t{256} << 10;  // this file's run_ranks sets 1 KiB
    collie::test::run_ranks(
        world,
        [&](collie::ProcessGroup& pg) {
          auto pair = pg.new_group({0, 1});
          auto& mine = picks[static_cast<std::size_t>(pg.rank())];
          for (auto bytes : sizes)
            mine.push_back(pg.choose_algorithm(collie::Collective::AllReduce,
                                               collie::DataType::Float32, bytes / 4));
          if (pg.rank() < 2)
            mine.push_back(pair.choose_algorithm(collie::Collective::AllReduce,
                                                 collie::DataType::Float32, (16 << 20) / 4));
        },
        std::chrono::seconds(30), [&](collie::InitOptions& o) {
          o.segment_bytes = segment;
          o.transport = transport;
        });
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      INFO("bytes " << sizes[i]);
      const auto expected = collie::collectives::auto_algorithm(
          collie::collectives::Collective::AllReduce, world, sizes[i] / 4, 4, segment,
          model_of(static_cast<double>(world) / cores));
      for (int r = 0; r < world; ++r)
        CHECK(picks[static_cast<std::size_t>(r)][i] == expected);
    }
    const auto pair_expected = collie::collectives::auto_algorithm(
        collie::collectives::Collective::AllReduce, 2, (16 << 20) / 4, 4, segment,
        model_of(2.0 / cores));
    CHECK(picks[0].back() == pair_expected);
    CHECK(picks[1].back() == pair_expected);
  }
}
