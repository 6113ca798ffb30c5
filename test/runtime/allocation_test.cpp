// A repeated call allocates nothing: every collective that runs a schedule,
// every algorithm of it, over shared memory and TCP, at a count smaller than
// the world, one of a few elements and one of several pipeline segments.
// This executable replaces operator new with one that counts, per thread,
// so each rank (a thread here) counts what its own calls allocate. After a
// few calls of a shape (its schedule kept, the queues and pools grown), the
// next ones must allocate nothing. Each call is followed by a barrier (one
// more call counted): a rank that only sends (a broadcast's root) could
// otherwise run ever further ahead, and its peers would queue ever more
// early messages, in memory that they cannot have held before. (The calls of counts per rank,
// all_to_all_v and its kin, make their messages' lists per call; an async
// call allocates its Work: neither is counted here. Built where no
// sanitizer replaces operator new itself: test/CMakeLists.txt.)
#include <cstdio>
#include <cstdlib>
#include <execinfo.h>
#include <new>
#include <vector>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/collectives/algorithms.hpp>
#include <collie/process_group.hpp>

#include "support/shm_skip.hpp"
#include "support/thread_ranks.hpp"

namespace {

thread_local long t_allocations = 0;
// While set on a thread, each allocation prints where it came from (set by
// the counted calls when COLLIE_TEST_ALLOCATION_STACKS is set: what a
// failure's search starts with; names need -rdynamic).
thread_local bool t_print = false;

void* counted(std::size_t n) {
  ++t_allocations;
  if (t_print) {
    t_print = false;
    void* frames[16];
    const int k = backtrace(frames, 16);
    std::fprintf(stderr, "allocated %zu bytes at:\n", n);
    backtrace_symbols_fd(frames, k, 2);
    t_print = true;
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

// (Out of line: inlined into a delete of memory from operator new, a bare
// free() reads to g++ as a mismatched pair.)
[[gnu::noinline]] void released(void* p) noexcept { std::free(p); }

}  // namespace

void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void operator delete(void* p) noexcept { released(p); }
void operator delete[](void* p) noexcept { released(p); }
void operator delete(void* p, std::size_t) noexcept { released(p); }
void operator delete[](void* p, std::size_t) noexcept { released(p); }

namespace {

using collie::collectives::Algorithm;
using collie::collectives::Collective;
using collie::test::expect;

// The calls counted after the warm-up ones.
constexpr int kWarmUp = 4, kCounted = 12;

struct Shape {
  Collective collective;
  Algorithm algorithm;
  std::size_t count;
};

std::vector<Shape> shapes(int world) {
  std::vector<Shape> out;
  for (const auto c : collie::collectives::kCollectives) {
    // Rooted or not, one each; a barrier has no count. Auto's too: a small
    // all_reduce and a barrier on shared memory go on the group's board.
    std::vector<Algorithm> algorithms{Algorithm::Auto};
    for (const auto a : collie::collectives::algorithms_for(c))
      algorithms.push_back(a);
    for (const auto a : algorithms) {
      for (const std::size_t count : {std::size_t{1}, std::size_t{2}, std::size_t{4096}}) {
        if (c == Collective::Barrier && count != 1) continue;
        out.push_back({c, a, count});
      }
    }
    (void)world;
  }
  return out;
}

// Runs every shape on this rank: warm-up calls, then counted ones; returns
// the shapes that allocated, with how much.
std::string run_shapes(collie::ProcessGroup& pg) {
  const int n = pg.size();
  const bool print = std::getenv("COLLIE_TEST_ALLOCATION_STACKS") != nullptr;
  std::string allocated;
  for (const auto& s : shapes(n)) {
    const int root = n - 1;
    const auto ext = collie::collectives::extents(s.collective, n, s.count, pg.rank(), root);
    std::vector<float> in(std::max<std::size_t>(ext.input.value_or(0), 1), 1.0f);
    std::vector<float> out(std::max<std::size_t>(ext.output.value_or(0), 1), 0.0f);
    collie::CollectiveOptions o;
    o.algorithm = s.algorithm;
    o.memory = collie::MemoryKind::Host;
    const auto call = [&] {
      pg.run_collective(s.collective, collie::DataType::Float32, ext.input ? in.data() : nullptr,
                        ext.output ? out.data() : nullptr, s.count, collie::ReduceOp::Sum, root,
                        o);
      pg.barrier();
    };
    for (int i = 0; i < kWarmUp; ++i)
      call();
    const long before = t_allocations;
    for (int i = 0; i < kCounted; ++i) {
      t_print = print;
      call();
      t_print = false;
      // The calls ran: an all_reduce of ones sums to the world.
      if (s.collective == Collective::AllReduce)
        for (std::size_t k = 0; k < s.count; ++k)
          if (out[k] != static_cast<float>(n))
            expect(false, fmt::format("all_reduce: element {} is {}, not {}", k, out[k], n));
    }
    const long got = t_allocations - before;
    pg.barrier();  // no rank leaves (closing its links) while others count
    if (got != 0) {
      allocated += fmt::format("\n  {} by {}, {} elements: {} allocations in {} calls",
                               collie::collectives::collective_name(s.collective),
                               collie::collectives::algorithm_name(s.algorithm), s.count, got,
                               kCounted);
    }
  }
  return allocated;
}

}  // namespace

TEST_CASE("a repeated call allocates nothing, on both transports", "[collective][allocation]") {
  const std::string transport = GENERATE("shm", "tcp");
  COLLIE_SKIP_WITHOUT_SHM(transport);
  for (const int world : {2, 3}) {
    INFO(transport << ", world " << world);
    collie::test::run_ranks(
        world,
        [&](collie::ProcessGroup& pg) {
          const auto allocated = run_shapes(pg);
          expect(allocated.empty(),
                 fmt::format("rank {} of {} on {}: repeated calls allocated:{}", pg.rank(), world,
                             transport, allocated));
        },
        std::chrono::seconds(60),
        [&](collie::InitOptions& o) {
          o.transport = transport;
          o.segment_bytes = 4096;  // 4 segments a message at 4096 elements
        });
  }
}

TEST_CASE("the counting operator new counts", "[allocation]") {
  // A test of the test: were operator new not replaced, the case above
  // could not fail.
  const long before = t_allocations;
  auto* p = new std::vector<int>(10);
  delete p;
  CHECK(t_allocations - before == 2);
}
