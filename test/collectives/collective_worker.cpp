// One rank of the multi-process collective tests (collective_launch_test.cpp),
// started by `collie launch -n N -- collie_collective_worker SCENARIO`:
//   matrix [full|smoke]  every case of support/collective_check's matrix,
//                        every element checked; prints "rank R: matrix ok (N
//                        cases)" or what was wrong.
//   victim [exit]        ranks all-reduce 8 MiB in a loop; rank 2 kills
//                        itself mid-way. Survivors print "failed after MS ms
//                        of waiting: MESSAGE" and exit 0 (with "exit": at
//                        once, saying goodbye to no one).
//   mismatch             rank 1 calls broadcast where the others call
//                        all_reduce; ranks that see it print "MismatchError: ...".
//   mismatches SMALL LARGE
//                        each kind of mismatch (count, dtype, op, root,
//                        algorithm) SMALL times at 4000 B and LARGE times at
//                        16 MiB, each on a fresh group of every rank, the
//                        odd rank moving; every rank prints "rank R: case
//                        KIND BYTES ODD: " then "MismatchError: MESSAGE",
//                        "completed, then " what the group's next calls (up
//                        to three barriers) raised, or "ERROR: MESSAGE".
//   mismatch_exit        rank 1 calls all_reduce with one element more at
//                        16 MiB; every rank prints what it gets and exits at
//                        once (as an uncaught exception would).
//   blame_chain          rank r < n-1 records in the store that it blames rank
//                        r+1 (as a failed collective does), then every rank
//                        exits 1: collie launch's summary must name rank n-1.
//   loop                 all_reduces of 1 MiB, each checked, until one fails;
//                        prints "rank R: looping" after the fifth, then
//                        "rank R: failed after MS ms of waiting: MESSAGE" (and
//                        exits 1).
//   stall stop|MS        three all_reduces, then rank 2 stops itself
//                        (SIGSTOP) or is busy for MS ms before the fourth;
//                        every rank prints "rank R: ok" (the sums checked)
//                        or "rank R: failed after MS ms of waiting: MESSAGE" (and
//                        exits 1). With COLLIE_TEST_TERM_HANDLER=1 the
//                        process has a SIGTERM handler of its own.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <collie/collie.hpp>

#include "collective_check.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int matrix(collie::ProcessGroup& pg, bool full) {
  const auto cases = collie::check::matrix(pg.size(), full);
  for (const auto& c : cases) {
    std::string first;
    std::size_t wrong = 0;
    try {
      wrong = collie::check::run_and_check(pg, c, first);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %d: %s: %s\n", pg.rank(), collie::check::describe(c).c_str(),
                   e.what());
      return 1;
    }
    if (wrong != 0) {
      std::fprintf(stderr, "rank %d: %s: %zu wrong; first: %s\n", pg.rank(),
                   collie::check::describe(c).c_str(), wrong, first.c_str());
      return 1;
    }
  }
  std::printf("rank %d: matrix ok (%zu cases; transport: %s)\n", pg.rank(), cases.size(),
              pg.describe_transport().c_str());
  return 0;
}

// Milliseconds of the monotonic clock, which every process of a host shares:
// tests compare one rank's time of death with another's time of failure.
long long clock_ms() {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now().time_since_epoch())
                                    .count());
}

// One all_reduce, timed. On a collie::Error it prints "rank R: failed after
// MS ms of waiting (clock C ms): MESSAGE" (MESSAGE led by "InterruptedError: "
// for one) and returns false.
bool all_reduce_or_say(collie::ProcessGroup& pg, std::span<float> v) {
  const auto start = Clock::now();
  try {
    pg.all_reduce(v);
    return true;
  } catch (const collie::Error& e) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::printf(
        "rank %d: failed after %lld ms of waiting (clock %lld ms): %s%s\n", pg.rank(),
        static_cast<long long>(ms), clock_ms(),
        dynamic_cast<const collie::InterruptedError*>(&e) != nullptr ? "InterruptedError: " : "",
        e.what());
    std::fflush(stdout);
    return false;
  }
}

int victim(collie::ProcessGroup& pg, bool exit_at_once) {
  std::vector<float> v(std::size_t{2} << 20, 1.0f);
  for (int i = 0;; ++i) {
    if (pg.rank() == 2 && i == 3) {
      // Die in the middle of the next collective: after its first messages.
      auto w = pg.all_reduce_async(std::span(v));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::printf("rank 2: dying (clock %lld ms)\n", clock_ms());
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
    if (!all_reduce_or_say(pg, std::span(v))) {
      if (exit_at_once) std::_Exit(0);  // no goodbye, as an uncaught exception
      return 0;
    }
  }
}

int mismatch(collie::ProcessGroup& pg) {
  std::vector<double> v(4096, 1.0);
  try {
    if (pg.rank() == 1)
      pg.broadcast(std::span(v), 0);
    else
      pg.all_reduce(std::span(v));
  } catch (const collie::MismatchError& e) {
    std::printf("rank %d: MismatchError: %s\n", pg.rank(), e.what());
  } catch (const collie::Error& e) {
    std::printf("rank %d: %s\n", pg.rank(), e.what());
  }
  return 0;
}

// One mismatch of `kind` on `g`: rank `odd` calls differently.
void mismatch_case(collie::ProcessGroup& g, const std::string& kind, std::size_t n, int odd) {
  using collie::collectives::Algorithm;
  const bool me = g.rank() == odd;
  std::vector<float> f(n + 1, 1.0f);
  std::vector<std::int32_t> i32(n, 1);
  auto first = [&](std::size_t count) { return std::span(f.data(), count); };
  if (kind == "count") {
    g.all_reduce(first(me ? n + 1 : n));
  } else if (kind == "dtype") {
    if (me)
      g.all_reduce(std::span(i32));
    else
      g.all_reduce(first(n));
  } else if (kind == "op") {
    g.all_reduce(first(n), me ? collie::ReduceOp::Max : collie::ReduceOp::Sum);
  } else if (kind == "root") {
    g.broadcast(first(n), me ? 1 : 0);
  } else if (kind == "algorithm") {
    collie::CollectiveOptions o;
    o.algorithm = me ? Algorithm::RecursiveDoubling : Algorithm::Ring;
    g.all_reduce(first(n), collie::ReduceOp::Sum, o);
  }
}

int mismatches(collie::ProcessGroup& world, int small, int large) {
  const int n = world.size();
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    everyone[static_cast<std::size_t>(r)] = r;
  int k = 0;
  for (const char* kind : {"count", "dtype", "op", "root", "algorithm"}) {
    for (int size = 0; size < 2; ++size) {
      const std::size_t count = size == 0 ? 1000 : std::size_t{4} << 20;
      for (int i = 0; i < (size == 0 ? small : large); ++i, ++k) {
        auto g = world.new_group(everyone);
        const int odd = (k % (n - 1)) + 1;  // never rank 0 (the root of "root")
        std::string line = "rank " + std::to_string(world.rank()) + ": case " + kind + " " +
                           std::to_string(count * 4) + " " + std::to_string(odd) + ": ";
        try {
          mismatch_case(g, kind, count, odd);
          line += "completed";
          // A rank may finish a call that did not match (a broadcast whose
          // root it thought was itself sends and returns; a rank that heard
          // nothing from it): the group's next calls say so.
          try {
            collie::CollectiveOptions o;
            o.timeout = std::chrono::seconds(20);
            for (int next = 0; next < 3; ++next) {
              g.barrier(o);
              line += ", then completed";
            }
          } catch (const collie::MismatchError& e) {
            line += std::string(", then MismatchError: ") + e.what();
          } catch (const std::exception& e) {
            line += std::string(", then ERROR: ") + e.what();
          }
        } catch (const collie::MismatchError& e) {
          line += std::string("MismatchError: ") + e.what();
        } catch (const std::exception& e) {
          line += std::string("ERROR: ") + e.what();
        }
        std::printf("%s\n", line.c_str());
        std::fflush(stdout);
        try {
          world.barrier();
        } catch (const std::exception& e) {
          std::printf("rank %d: the world's barrier after case %s %d: ERROR: %s\n", world.rank(),
                      kind, k, e.what());
          return 1;
        }
      }
    }
  }
  return 0;
}

int mismatch_exit(collie::ProcessGroup& pg) {
  std::vector<float> v((std::size_t{4} << 20) + 1, 1.0f);
  try {
    pg.all_reduce(std::span(v.data(), pg.rank() == 1 ? v.size() : v.size() - 1));
    std::printf("rank %d: completed\n", pg.rank());
  } catch (const collie::MismatchError& e) {
    std::printf("rank %d: MismatchError: %s\n", pg.rank(), e.what());
  } catch (const std::exception& e) {
    std::printf("rank %d: ERROR: %s\n", pg.rank(), e.what());
  }
  std::fflush(stdout);
  std::_Exit(0);  // at once: no goodbye to the peers
}

int blame_chain(collie::ProcessGroup& pg) {
  if (pg.rank() + 1 < pg.size())
    pg.store().set("blame/" + std::to_string(pg.rank()),
                   std::to_string(pg.rank() + 1) + " rank " + std::to_string(pg.rank()) +
                       ": waited for rank " + std::to_string(pg.rank() + 1));
  pg.barrier();  // every record is in before anyone exits
  return 1;
}

int loop(collie::ProcessGroup& pg, std::size_t count) {
  std::vector<float> v(count);
  for (int i = 0;; ++i) {
    std::fill(v.begin(), v.end(), static_cast<float>(pg.rank() + i % 7));
    if (!all_reduce_or_say(pg, std::span(v))) return 1;
    const int n = pg.size();
    const float want = static_cast<float>(n * (n - 1) / 2 + n * (i % 7));
    for (float x : v) {
      if (x != want) {
        std::printf("rank %d: wrong sum %g, expected %g\n", pg.rank(), double(x), double(want));
        return 1;
      }
    }
    if (i == 4) {
      std::printf("rank %d: looping\n", pg.rank());
      std::fflush(stdout);
    }
  }
}

int stall(collie::ProcessGroup& pg, const std::string& mode) {
  std::vector<float> v(1000);
  for (int i = 0; i < 4; ++i) {
    std::fill(v.begin(), v.end(), static_cast<float>(pg.rank() + i));
    if (i == 3 && pg.rank() == 2) {
      if (mode == "stop") {
        std::printf("rank 2: stopping\n");
        std::fflush(stdout);
        std::raise(SIGSTOP);
        return 0;
      }
      std::printf("rank 2: busy\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoi(mode)));
    }
    if (!all_reduce_or_say(pg, std::span(v))) return 1;
    const int n = pg.size();
    const float want = static_cast<float>(n * (n - 1) / 2 + n * i);
    for (float x : v) {
      if (x != want) {
        std::printf("rank %d: wrong sum %g, expected %g\n", pg.rank(), double(x), double(want));
        return 1;
      }
    }
  }
  std::printf("rank %d: ok\n", pg.rank());
  std::fflush(stdout);
  return 0;
}

// A program's own SIGTERM handler (COLLIE_TEST_TERM_HANDLER=1), installed
// before init: it only notes the signal, as a program that saves its work
// would.
volatile std::sig_atomic_t g_term = 0;
void on_term(int) {
  g_term = 1;
}

}  // namespace

// Makes the group three times in this process (torch's
// destroy_process_group, then init_process_group), an all_reduce each time
// checked against its sum.
int reinit() {
  try {
    for (int round = 0; round < 3; ++round) {
      auto pg = collie::init();
      const int n = pg.size();
      std::vector<std::int64_t> v(1009);
      for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<std::int64_t>(i) * (pg.rank() + 1) + round;
      pg.all_reduce(std::span(v));
      for (std::size_t i = 0; i < v.size(); ++i) {
        const auto want = static_cast<std::int64_t>(i) * n * (n + 1) / 2 + round * n;
        if (v[i] != want) {
          std::fprintf(stderr, "rank %d round %d: element %zu is %lld, expected %lld\n",
                       pg.rank(), round, i, static_cast<long long>(v[i]),
                       static_cast<long long>(want));
          return 1;
        }
      }
      std::printf("rank %d: round %d ok\n", pg.rank(), round);
      std::fflush(stdout);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reinit: %s\n", e.what());
    return 1;
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: collie_collective_worker matrix [full|smoke] | victim | mismatch | "
                 "mismatches SMALL LARGE | mismatch_exit | blame_chain | loop [COUNT] | "
                 "stall stop|MS | reinit\n");
    return 2;
  }
  const std::string scenario = argv[1];
  if (const char* h = std::getenv("COLLIE_TEST_TERM_HANDLER"); h != nullptr && *h == '1')
    std::signal(SIGTERM, on_term);
  if (scenario == "reinit") return reinit();
  try {
    auto pg = collie::init();
    if (scenario == "matrix") return matrix(pg, argc > 2 && std::string(argv[2]) == "full");
    if (scenario == "victim") return victim(pg, argc > 2 && std::string(argv[2]) == "exit");
    if (scenario == "mismatch") return mismatch(pg);
    if (scenario == "loop")
      return loop(pg, argc > 2 ? std::stoul(argv[2]) : std::size_t{1} << 18);
    if (scenario == "blame_chain") return blame_chain(pg);
    if (scenario == "mismatches" && argc > 3)
      return mismatches(pg, std::stoi(argv[2]), std::stoi(argv[3]));
    if (scenario == "mismatch_exit") return mismatch_exit(pg);
    if (scenario == "stall" && argc > 2) return stall(pg, argv[2]);
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
