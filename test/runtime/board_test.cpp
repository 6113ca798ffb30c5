// Small calls on a group's board (board_call.hpp, transport/board.hpp), the
// ranks as threads of this process over shared memory: every dtype and op
// checked element by element against the checker's reference, the same bits
// on every rank, calls in flight at once, which calls go on it, and how its
// failures are named (a mismatch, a member that left, a timeout).
#include <cstring>
#include <future>
#include <mutex>
#include <thread>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/process_group.hpp>
#include <collie/transport/board.hpp>

#include "collective_check.hpp"
#include "support/shm_skip.hpp"
#include "support/thread_ranks.hpp"

using namespace std::chrono_literals;
using collie::Collective;
using collie::DataType;
using collie::ReduceOp;
using collie::test::expect;

namespace {

void run_shm(int world, const std::function<void(collie::ProcessGroup&)>& body,
             std::chrono::milliseconds timeout = 60s) {
  collie::test::run_ranks(world, body, timeout,
                          [](collie::InitOptions& o) { o.transport = "shm"; });
}

// Every dtype and the ops it supports, at 1 element, one fewer than the
// ranks, and as many as fill an entry; in place and async too.
std::vector<collie::check::CollectiveCase> board_cases(int world) {
  std::vector<collie::check::CollectiveCase> cases;
  for (auto t : collie::kDataTypes) {
    const std::size_t most = collie::transport::Board::kBytes / collie::dtype_size(t);
    for (auto op : collie::kReduceOps) {
      if (!collie::supports(t, op)) continue;
      for (std::size_t count : {std::size_t{1}, static_cast<std::size_t>(world - 1), most}) {
        collie::check::CollectiveCase c;
        c.collective = Collective::AllReduce;
        c.dtype = t;
        c.op = op;
        c.count = count;
        cases.push_back(c);
      }
      collie::check::CollectiveCase inplace;
      inplace.collective = Collective::AllReduce;
      inplace.dtype = t;
      inplace.op = op;
      inplace.count = 5;
      inplace.in_place = true;
      cases.push_back(inplace);
      auto async = inplace;
      async.async = true;
      cases.push_back(async);
    }
  }
  collie::check::CollectiveCase barrier;
  barrier.collective = Collective::Barrier;
  barrier.dtype = DataType::UInt8;
  barrier.count = 1;
  cases.push_back(barrier);
  return cases;
}

}  // namespace

TEST_CASE("the board: every dtype and op, worlds 2 to 8, checked against the reference",
          "[collective][board][volume]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  for (int world = 2; world <= 8; ++world) {
    INFO("world " << world);
    const auto cases = board_cases(world);
    run_shm(world, [&](collie::ProcessGroup& pg) {
      for (const auto& c : cases) {
        const auto what = collie::check::describe(c);
        expect(pg.uses_board(c.collective, c.dtype, c.count), what + ": not on the board");
        std::string first;
        const auto wrong = collie::check::run_and_check(pg, c, first);
        expect(wrong == 0, fmt::format("{}: {} wrong; first: {}", what, wrong, first));
      }
    });
  }
}

TEST_CASE("the board: every rank gets the same bits, summed in rank order",
          "[collective][board]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  // Floats whose sum depends on the order: each rank adds one large and
  // one tiny value per element, at places that differ by rank.
  const int world = 5;
  constexpr std::size_t count = 60;  // 240 bytes: a full entry
  std::vector<std::vector<float>> results(world);
  run_shm(world, [&](collie::ProcessGroup& pg) {
    const int r = pg.rank();
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i)
      v[i] = (static_cast<int>(i) + r) % 2 == 0 ? 1.0e8f * static_cast<float>(r + 1)
                                                : 3.0f + 0.1f * static_cast<float>(i);
    pg.all_reduce(std::span(v));
    results[static_cast<std::size_t>(r)] = v;
  });
  // What a sum in rank order gives, computed here.
  std::vector<float> want(count, 0.0f);
  for (int r = 0; r < world; ++r)
    for (std::size_t i = 0; i < count; ++i)
      want[i] += (static_cast<int>(i) + r) % 2 == 0 ? 1.0e8f * static_cast<float>(r + 1)
                                                   : 3.0f + 0.1f * static_cast<float>(i);
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    CHECK(std::memcmp(results[static_cast<std::size_t>(r)].data(), want.data(),
                      count * sizeof(float)) == 0);
  }
}

TEST_CASE("the board: async calls still queued and a blocking call after them run in order",
          "[collective][board]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  run_shm(3, [&](collie::ProcessGroup& pg) {
    constexpr int kCalls = 40;
    std::vector<std::vector<std::int32_t>> v(kCalls);
    std::vector<collie::Work> works;
    for (int i = 0; i < kCalls; ++i) {
      v[static_cast<std::size_t>(i)] = {i, pg.rank(), 1};
      if (i % 5 == 4) {
        pg.all_reduce(std::span(v[static_cast<std::size_t>(i)]));  // blocking, amid them
      } else {
        works.push_back(pg.all_reduce_async(std::span(v[static_cast<std::size_t>(i)])));
      }
    }
    for (auto& w : works)
      w.wait();
    for (int i = 0; i < kCalls; ++i) {
      const auto& got = v[static_cast<std::size_t>(i)];
      expect(got == std::vector<std::int32_t>{3 * i, 0 + 1 + 2, 3},
             fmt::format("call {}: [{}, {}, {}]", i, got[0], got[1], got[2]));
    }
  });
}

TEST_CASE("the board takes small all_reduces and barriers where every member shares memory",
          "[collective][board]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  const auto most_floats = collie::transport::Board::kBytes / 4;
  run_shm(4, [&](collie::ProcessGroup& pg) {
    expect(pg.uses_board(Collective::AllReduce, DataType::Float32, 1), "1 float");
    expect(pg.uses_board(Collective::AllReduce, DataType::Float32, most_floats), "a full entry");
    expect(!pg.uses_board(Collective::AllReduce, DataType::Float32, most_floats + 1),
           "one more than fits");
    expect(!pg.uses_board(Collective::AllReduce, DataType::Float32, 0), "count 0");
    expect(pg.uses_board(Collective::Barrier, DataType::UInt8, 1), "barrier");
    expect(!pg.uses_board(Collective::Broadcast, DataType::Float32, 1), "broadcast");
    // A sub-group has a board of its own.
    auto sub = pg.new_group({0, 2});
    if (sub.rank() >= 0) {
      expect(sub.uses_board(Collective::AllReduce, DataType::Int64, 3), "sub-group");
      std::vector<std::int64_t> v{1, pg.rank(), 7};
      sub.all_reduce(std::span(v));
      expect(v == std::vector<std::int64_t>{2, 2, 14}, "sub-group's sum");
    }
    std::vector<std::int64_t> w{pg.rank()};
    pg.all_reduce(std::span(w));
    expect(w[0] == 6, "the world's sum after the sub-group's");
  });
  // A forced algorithm runs its schedule; TCP has no board; past
  // Board::kMostMembers neither.
  collie::test::run_ranks(
      2,
      [&](collie::ProcessGroup& pg) {
        expect(!pg.uses_board(Collective::AllReduce, DataType::Float32, 1), "COLLIE_ALGO");
        expect(pg.uses_board(Collective::Barrier, DataType::UInt8, 1), "barrier not forced");
      },
      30s,
      [](collie::InitOptions& o) {
        o.transport = "shm";
        o.algorithms = "all_reduce:ring";
      });
  collie::test::run_ranks(
      2,
      [&](collie::ProcessGroup& pg) {
        expect(!pg.uses_board(Collective::AllReduce, DataType::Float32, 1), "tcp");
      },
      30s, [](collie::InitOptions& o) { o.transport = "tcp"; });
  const int past = static_cast<int>(collie::transport::Board::kMostMembers) + 1;
  run_shm(past, [&](collie::ProcessGroup& pg) {
    expect(!pg.uses_board(Collective::AllReduce, DataType::Float32, 1), "past the most members");
    std::vector<float> v{1.0f};
    pg.all_reduce(std::span(v));
    expect(v[0] == static_cast<float>(past), "the sum by messages");
  });
}

TEST_CASE("the board: calls that differ are named on every rank", "[collective][board]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  // Both on the board, counts differ.
  std::vector<std::string> messages(2);
  run_shm(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(pg.rank() == 0 ? 2 : 3, 1.0f);
    try {
      pg.all_reduce(std::span(v));
      throw std::runtime_error("no mismatch seen");
    } catch (const collie::MismatchError& e) {
      messages[static_cast<std::size_t>(pg.rank())] = e.what();
    }
  }, 20s);
  CHECK_THAT(messages[0], ContainsSubstring("rank 1 called all_reduce(float32, 3, sum) but rank 0 "
                                          "called all_reduce(float32, 2, sum)"));
  CHECK_THAT(messages[1], ContainsSubstring("rank 0 called all_reduce(float32, 2, sum) but rank 1 "
                                          "called all_reduce(float32, 3, sum)"));
  // One on the board, the other by messages (a forced ring): the board's
  // member finds the ring's message under its call's tag, and tells it.
  std::vector<std::string> mixed(2);
  run_shm(2, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(2, 1.0f);
    collie::CollectiveOptions o;
    if (pg.rank() == 1) o.algorithm = collie::Algorithm::Ring;
    try {
      pg.all_reduce(std::span(v), ReduceOp::Sum, o);
      throw std::runtime_error("no mismatch seen");
    } catch (const collie::MismatchError& e) {
      mixed[static_cast<std::size_t>(pg.rank())] = e.what();
    }
  }, 20s);
  CHECK_THAT(mixed[0], ContainsSubstring("rank 1 called all_reduce(float32, 2, sum) with ring"));
  CHECK_THAT(mixed[1], ContainsSubstring("does not match"));
  // One on the board, the others waiting for its message (a broadcast from
  // it): they read its entry, and every rank names both calls.
  std::vector<std::string> waiting(3);
  run_shm(3, [&](collie::ProcessGroup& pg) {
    std::vector<float> v(4, 1.0f);
    try {
      if (pg.rank() == 0)
        pg.all_reduce(std::span(v));
      else
        pg.broadcast(std::span(v), 0);
      throw std::runtime_error("no mismatch seen");
    } catch (const collie::MismatchError& e) {
      waiting[static_cast<std::size_t>(pg.rank())] = e.what();
    }
  }, 20s);
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    CHECK_THAT(waiting[static_cast<std::size_t>(r)],
               ContainsSubstring("all_reduce(float32, 4, sum)") &&
                   ContainsSubstring("broadcast(float32, 4, root=0)"));
  }
}

TEST_CASE("the board: a member that left is named, and a wait past its timeout names who is "
          "missing",
          "[collective][board]") {
  COLLIE_SKIP_WITHOUT_SHM(std::string("shm"));
  // Rank 2 closes its group (and transport) without calling.
  std::vector<std::string> left(3);
  run_shm(3, [&](collie::ProcessGroup& pg) {
    if (pg.rank() == 2) return;
    std::vector<float> v{1.0f};
    try {
      pg.all_reduce(std::span(v));
      throw std::runtime_error("no failure seen");
    } catch (const collie::ConnectionError& e) {
      left[static_cast<std::size_t>(pg.rank())] = e.what();
    }
  }, 20s);
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    // Found here, or told by the other rank, which found it first; or
    // found gone when this rank first opened its mailbox (in this one
    // process its descriptor may already name another file).
    CHECK_THAT(left[static_cast<std::size_t>(r)],
               ContainsSubstring("rank 2") && (ContainsSubstring("closed its transport") ||
                                             ContainsSubstring("failed during this collective") ||
                                             ContainsSubstring("no shared memory with rank 2")));
  }
  // Rank 2 calls nothing until rank 0, whose timeout is short, gave up
  // waiting for it (rank 1 hears of that from rank 0).
  std::string late;
  std::promise<void> gave_up;
  run_shm(3, [&](collie::ProcessGroup& pg) {
    if (pg.rank() == 2) {
      gave_up.get_future().wait();
      return;
    }
    std::vector<float> v{1.0f};
    collie::CollectiveOptions o;
    if (pg.rank() == 0) o.timeout = 300ms;
    try {
      pg.all_reduce(std::span(v), ReduceOp::Sum, o);
      throw std::runtime_error("no failure");
    } catch (const collie::TimeoutError& e) {
      if (pg.rank() == 0) {
        late = e.what();
        gave_up.set_value();
      }
    } catch (const collie::Error&) {
      expect(pg.rank() == 1, "rank 0 failed otherwise");
    }
  }, 20s);
  CHECK_THAT(late, ContainsSubstring("no entry yet from rank 2") &&
                       ContainsSubstring("the call's timeout ran out"));
}
