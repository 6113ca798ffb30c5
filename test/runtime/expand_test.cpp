// ProcessGroup::expand() and sync_state(), ranks and newcomers as threads
// of this process (a file:// store): a newcomer admitted and handed the
// state, an expand with no one waiting, a state that differs, a newcomer
// no member admits, and a shrink then an expand. Processes, a killed rank
// and its replacement: shrink_launch_test.cpp.
#include <atomic>
#include <future>
#include <numeric>
#include <thread>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/keys.hpp>
#include <collie/process_group.hpp>

#include "support/scratch_dir.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::test::expect;

namespace {

// Waits (a second at a time, up to a minute) until `n` newcomers have come
// to the run of `pg`'s job, so that the next expand() admits them.
void await_newcomers(collie::ProcessGroup& pg, std::int64_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (pg.store().add(collie::keys::kExpandTickets, 0) < n) {
    expect(std::chrono::steady_clock::now() < deadline, "the newcomer never came");
    pg.store().wait({"expand/newcomer/" + std::to_string(n)}, 1s);
  }
}

// A job of `members` threads and `joining` newcomer threads on one file
// store: members(pg) and newcomer(pg) on each; every error rethrown here.
void run_job(int members, int joining, const std::function<void(collie::ProcessGroup&)>& member,
             const std::function<void(collie::ProcessGroup&)>& newcomer,
             std::chrono::milliseconds timeout = 30s) {
  collie::test::ScratchDir dir;
  const auto url = "file://" + (dir.path() / "store").string();
  std::vector<std::future<void>> threads;
  for (int r = 0; r < members + joining; ++r) {
    threads.push_back(std::async(std::launch::async, [&, r] {
      collie::InitOptions o;
      o.init_method = url;
      o.timeout = timeout;
      if (r < members) {
        o.rank = r;
        o.world_size = members;
        auto pg = collie::init(o);
        member(pg);
      } else {
        o.join = true;
        auto pg = collie::init(o);
        newcomer(pg);
      }
    }));
  }
  std::string errors;
  for (auto& t : threads) {
    try {
      t.get();
    } catch (const std::exception& e) {
      errors += std::string("\n") + e.what();
    }
  }
  if (!errors.empty()) FAIL(errors);
}

// The sum of each rank's (rank + 1), by an all_reduce.
int sum_of_ranks(collie::ProcessGroup& pg) {
  std::int32_t v = pg.rank() + 1;
  pg.all_reduce(std::span(&v, 1));
  return v;
}

}  // namespace

TEST_CASE("expand: a newcomer joins after the members, and receives their state", "[expand]") {
  run_job(
      3, 1,
      [](collie::ProcessGroup& pg) {
        std::vector<double> weights(1000);
        std::iota(weights.begin(), weights.end(), 0.5);
        std::int64_t step = 42;
        await_newcomers(pg, 1);
        auto next = pg.expand();
        expect(next.size() == 4 && next.rank() == pg.rank(),
               fmt::format("member {}: rank {} of {} after expand", pg.rank(), next.rank(),
                           next.size()));
        expect(next.newcomers() == std::vector<int>{3}, "the newcomers a member sees");
        next.sync_state({collie::StateBuffer::of("step", std::span(&step, 1)),
                         collie::StateBuffer::of("weights", std::span(weights))});
        expect(sum_of_ranks(next) == 10, "the expanded group's sum");
        try {
          sum_of_ranks(pg);
          expect(false, "a call on the group expand() replaced went through");
        } catch (const collie::Error& e) {
          expect(std::string(e.what()).find("expand() replaced it with world of 4") !=
                     std::string::npos,
                 std::string("the replaced group's error: ") + e.what());
        }
      },
      [](collie::ProcessGroup& pg) {
        expect(pg.rank() == 3 && pg.size() == 4,
               fmt::format("the newcomer is rank {} of {}", pg.rank(), pg.size()));
        expect(pg.newcomers() == std::vector<int>{3}, "the newcomers the newcomer sees");
        std::vector<double> weights(1000, -1);
        std::int64_t step = 0;
        pg.sync_state({collie::StateBuffer::of("step", std::span(&step, 1)),
                       collie::StateBuffer::of("weights", std::span(weights))});
        expect(step == 42, fmt::format("the step handed over: {}", step));
        for (std::size_t i = 0; i < weights.size(); ++i)
          expect(weights[i] == static_cast<double>(i) + 0.5,
                 fmt::format("weight {} is {}", i, weights[i]));
        expect(sum_of_ranks(pg) == 10, "the newcomer's sum");
      });
}

TEST_CASE("expand with no newcomer returns the same group, still in use", "[expand]") {
  collie::test::run_ranks(3, [](collie::ProcessGroup& pg) {
    auto same = pg.expand();
    expect(same.size() == 3 && same.newcomers().empty(), "the group after an empty expand");
    expect(sum_of_ranks(pg) == 6 && sum_of_ranks(same) == 6, "the sums after an empty expand");
    // Twice in a row, and world size 1 alike.
    expect(pg.expand().expand().size() == 3, "two empty expands");
  });
  collie::test::run_ranks(1, [](collie::ProcessGroup& pg) {
    expect(pg.expand().size() == 1, "an empty expand of one rank");
  });
}

TEST_CASE("expand of a shrunk sub-group: two newcomers join its members", "[expand]") {
  // Ranks 0 and 2 make a group, shrink it (no one lost), and take in two
  // newcomers; rank 1 only helps make the group, and leaves.
  run_job(
      3, 2,
      [&](collie::ProcessGroup& pg) {
        const int me = pg.rank();
        auto sub = pg.new_group({0, 2});
        if (me == 1) return;
        auto small = sub.shrink(20s);
        expect(small.size() == 2, fmt::format("shrunk to {}", small.size()));
        await_newcomers(small, 2);
        auto next = small.expand();
        expect(next.size() == 4 && next.newcomers() == std::vector<int>{2, 3},
               fmt::format("rank {} of {} after expand", next.rank(), next.size()));
        std::int32_t from = me;  // which old rank this is, for the newcomers
        next.sync_state({collie::StateBuffer::of("from", std::span(&from, 1))});
        expect(sum_of_ranks(next) == 10, "the sum of the 4");
      },
      [&](collie::ProcessGroup& pg) {
        std::int32_t from = -1;
        pg.sync_state({collie::StateBuffer::of("from", std::span(&from, 1))});
        expect(from == 0, fmt::format("the state came from old rank {}", from));
        expect(pg.size() == 4 && pg.rank() >= 2, "a newcomer's place");
        expect(sum_of_ranks(pg) == 10, "a newcomer's sum");
      });
}

TEST_CASE("sync_state: a member whose state differs fails every member, naming the buffer",
          "[expand]") {
  collie::test::run_ranks(3, [](collie::ProcessGroup& pg) {
    std::vector<float> a(8, 1.0f), b(pg.rank() == 2 ? 5 : 4, 2.0f);
    try {
      pg.sync_state({collie::StateBuffer::of("a", std::span(a)),
                     collie::StateBuffer::of("b", std::span(b))});
      expect(false, "sync_state went through with shapes that differ");
    } catch (const collie::MismatchError& e) {
      const std::string what = e.what();
      if (pg.rank() == 2)
        expect(what.find("'b' (5 x float32)") != std::string::npos, "rank 2's words: " + what);
      else
        expect(what.find("rank 2's state differs") != std::string::npos, "the others' words: " + what);
    }
    // Nothing was sent: the group is still in step.
    expect(sum_of_ranks(pg) == 6, "the sum after the refused sync");
    std::vector<float> c(3, static_cast<float>(pg.rank()));
    pg.sync_state({collie::StateBuffer::of("c", std::span(c))}, 1);
    expect(c == std::vector<float>(3, 1.0f), "the state from root 1");
  });
}

TEST_CASE("a newcomer no member admits is told so at its timeout", "[expand]") {
  collie::test::ScratchDir dir;
  collie::InitOptions o;
  o.init_method = "file://" + (dir.path() / "store").string();
  o.timeout = 1500ms;
  o.join = true;
  const auto start = std::chrono::steady_clock::now();
  try {
    collie::init(o);
    FAIL("a newcomer joined a job that does not run");
  } catch (const collie::TimeoutError& e) {
    const std::string what = e.what();
    CHECK_THAT(what, ContainsSubstring("no member admitted it") &&
                         ContainsSubstring("ProcessGroup::expand()"));
  }
  CHECK(std::chrono::steady_clock::now() - start >= 1400ms);
}

TEST_CASE("expand: a member lost since the last call fails it, and the survivors shrink, then "
          "take the newcomer in",
          "[expand]") {
  run_job(
      3, 1,
      [](collie::ProcessGroup& pg) {
        expect(sum_of_ranks(pg) == 6, "the first sum");
        if (pg.rank() == 2) return;  // gone: its world closes with this thread's handle
        await_newcomers(pg, 1);
        try {
          pg.expand();
          expect(false, "expand went through with rank 2 gone");
        } catch (const collie::ConnectionError& e) {
          expect(std::string(e.what()).find("rank 2") != std::string::npos,
                 std::string("the lost member is not named: ") + e.what());
        }
        auto small = pg.shrink(20s);
        expect(small.size() == 2, fmt::format("shrunk to {}", small.size()));
        auto next = small.expand();
        expect(next.size() == 3 && next.newcomers() == std::vector<int>{2},
               fmt::format("rank {} of {} after the expand", next.rank(), next.size()));
        expect(sum_of_ranks(next) == 6, "the sum with the newcomer");
      },
      [](collie::ProcessGroup& pg) {
        expect(pg.rank() == 2 && pg.size() == 3,
               fmt::format("the newcomer is rank {} of {}", pg.rank(), pg.size()));
        expect(sum_of_ranks(pg) == 6, "the newcomer's sum");
      });
}
