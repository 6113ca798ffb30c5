// One rank of the shrink tests (shrink_launch_test.cpp), started by the test
// on a store of its own (so that the store outlives any rank):
//
//   collie_shrink_worker STEPS KILL_STEP VICTIMS [LATE [MODE]]
//
// Runs STEPS all_reduces of 1 MiB (float32): in step s, world rank w adds
// (w + 1) * (s + 1) to every element. At step KILL_STEP each rank of VICTIMS
// (world ranks, comma-separated) starts the call and kills itself (SIGKILL)
// 5 ms later, printing "rank W: dying (clock C ms)". A survivor whose call
// fails prints "rank W: failed at step S (clock C ms): MESSAGE", then
// shrinks the group and redoes the earliest step a survivor has not
// finished (an all_reduce of the step, min): "rank W: shrunk to N members
// [w, ...] at step R (clock C ms; shrink S ms)" (the members gathered from the new
// group itself; S: how long shrink() itself took;
// where that first call fails, "rank W: the shrunk group failed (clock C
// ms): MESSAGE", and it shrinks again).
// LATE (a world rank, -1 for none): on its failure, MODE "die" (the
// default) dies 100 ms later without calling shrink, while the others
// shrink ("rank W: dying during the shrink (clock C ms)"); MODE "stay"
// sleeps for a minute instead of shrinking (alive, elsewhere).
// Every step's result is checked element by element against the sum over
// the step's members; at the end "rank W: done STEPS steps, N members, sums
// ok, state X", or "rank W: step S element I is X, not Y" (exit 1), or
// "rank W: shrink failed (clock C ms): MESSAGE" (exit 2).
//
// The state: every rank adds each step's first element to X, a running
// total a newcomer receives from a member (sync_state), with the step;
// where the survivors redo a step, X goes back to what it was before it.
// With WORKER_EXPAND_STEP=E, the members call expand() before every step;
// before step E, unless one joined already, they first wait (up to a
// minute) for a newcomer to come.
// A process started with COLLIE_JOIN=1 is a newcomer: init() admits it,
// its W is 100 + its rank there, and it prints "rank W: joined as rank R
// of N at step S (clock C ms)"; the members print "rank W: expanded to N
// members (clock C ms)".
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <collie/collie.hpp>
#include <collie/keys.hpp>

namespace {

long long clock_ms() {
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::steady_clock::now().time_since_epoch())
                                    .count());
}

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(std::stoi(item));
  return out;
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// The world ranks of `pg`'s members, in its order: gathered from the group.
std::vector<int> members_of(collie::ProcessGroup& pg, int world_rank) {
  std::vector<std::int32_t> all(static_cast<std::size_t>(pg.size()));
  std::int32_t mine = world_rank;
  pg.all_gather(std::span(&mine, 1), std::span(all));
  return {all.begin(), all.end()};
}

// Before step `expand_step`, a member waits (a minute at most) until a
// newcomer has come to the run, so that this step's expand() admits it;
// false if none came.
bool newcomer_of_this_step_done(collie::ProcessGroup& pg, int s, int expand_step) {
  if (s != expand_step) return true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (pg.store().add(collie::keys::kExpandTickets, 0) < 1) {
    if (std::chrono::steady_clock::now() > deadline) {
      say("no newcomer came within a minute");
      return false;
    }
    try {
      pg.store().wait({collie::keys::expand_newcomer(1)}, std::chrono::seconds(1));
    } catch (const collie::TimeoutError&) {
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s STEPS KILL_STEP VICTIMS [LATE [MODE]]\n", argv[0]);
    return 64;
  }
  const int steps = std::atoi(argv[1]);
  const int kill_step = std::atoi(argv[2]);
  const auto victims = parse_ranks(argv[3]);
  const int late = argc > 4 ? std::atoi(argv[4]) : -1;
  const std::string mode = argc > 5 ? argv[5] : "die";
  const char* expand_text = std::getenv("WORKER_EXPAND_STEP");
  const int expand_step = expand_text != nullptr ? std::atoi(expand_text) : -1;
  try {
    auto pg = collie::init();
    const auto joined = pg.newcomers();
    const bool newcomer = std::find(joined.begin(), joined.end(), pg.rank()) != joined.end();
    const int me = newcomer ? 100 + pg.rank() : pg.rank();
    const bool victim = std::find(victims.begin(), victims.end(), me) != victims.end();
    // The state a newcomer is handed: the step, and the running total.
    std::int32_t step = 0;
    double total = 0;
    const auto state = [&] {
      return std::vector<collie::StateBuffer>{collie::StateBuffer::of("step", std::span(&step, 1)),
                                              collie::StateBuffer::of("total", std::span(&total, 1))};
    };
    if (newcomer) {
      pg.sync_state(state());
      say("rank " + std::to_string(me) + ": joined as rank " + std::to_string(pg.rank()) +
          " of " + std::to_string(pg.size()) + " at step " + std::to_string(step) + " (clock " +
          std::to_string(clock_ms()) + " ms)");
    }
    auto members = members_of(pg, me);
    // Whether a newcomer joined (then the group is a world of its own,
    // whose store is no longer the run's, where newcomers are counted).
    bool grown = newcomer;
    std::vector<float> v(std::size_t{1} << 18);
    // The total before each step, to go back to where the survivors redo
    // a step (one that finished here may have failed elsewhere).
    std::vector<double> total_before(static_cast<std::size_t>(steps) + 1, 0);
    for (int s = step; s < steps;) {
      total_before[static_cast<std::size_t>(s)] = total;
      if (expand_step >= 0 && !grown && !newcomer_of_this_step_done(pg, s, expand_step)) return 4;
      // The expand() is in the step's try: a member lost since the last
      // call fails it, and the survivors shrink as for a failed step.
      try {
        if (expand_step >= 0) {
          auto next = pg.expand();
          if (!next.newcomers().empty() && next.size() != pg.size()) {
            pg = next;
            grown = true;
            step = s;
            pg.sync_state(state());
            members = members_of(pg, me);
            say("rank " + std::to_string(me) + ": expanded to " + std::to_string(pg.size()) +
                " members (clock " + std::to_string(clock_ms()) + " ms)");
          }
        }
        const float mine = static_cast<float>((me + 1) * (s + 1));
        std::fill(v.begin(), v.end(), mine);
        if (victim && s == kill_step) {
          auto w = pg.all_reduce_async(std::span(v));
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          say("rank " + std::to_string(me) + ": dying (clock " + std::to_string(clock_ms()) +
              " ms)");
          std::raise(SIGKILL);
        }
        pg.all_reduce(std::span(v));
      } catch (const collie::Error& e) {
        say("rank " + std::to_string(me) + ": failed at step " + std::to_string(s) + " (clock " +
            std::to_string(clock_ms()) + " ms): " + e.what());
        if (me == late) {
          if (mode == "stay") {
            std::this_thread::sleep_for(std::chrono::seconds(60));
            return 0;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          say("rank " + std::to_string(me) + ": dying during the shrink (clock " +
              std::to_string(clock_ms()) + " ms)");
          std::raise(SIGKILL);
        }
        // Shrink until the new group's first call (the gathering of its
        // members) goes through: a member that died during the shrink fails
        // it, and the survivors shrink again.
        long long shrink_ms = 0;  // how long the last shrink() took
        for (bool settled = false; !settled;) {
          try {
            const long long before = clock_ms();
            pg = pg.shrink();
            shrink_ms = clock_ms() - before;
          } catch (const collie::Error& e2) {
            say("rank " + std::to_string(me) + ": shrink failed (clock " +
                std::to_string(clock_ms()) + " ms): " + e2.what());
            return 2;
          }
          try {
            members = members_of(pg, me);
            // A call that failed on one member may have finished on
            // another (it had every piece it needed): the survivors go on
            // from the earliest step any of them has not finished.
            std::int32_t at = s;
            pg.all_reduce(std::span(&at, 1), collie::ReduceOp::Min);
            s = at;
            total = total_before[static_cast<std::size_t>(s)];
            settled = true;
          } catch (const collie::ConnectionError& e3) {
            say("rank " + std::to_string(me) + ": the shrunk group failed (clock " +
                std::to_string(clock_ms()) + " ms): " + e3.what());
          }
        }
        std::string list;
        for (int m : members)
          list += (list.empty() ? "" : ", ") + std::to_string(m);
        say("rank " + std::to_string(me) + ": shrunk to " + std::to_string(pg.size()) +
            " members [" + list + "] at step " + std::to_string(s) + " (clock " + std::to_string(clock_ms()) + " ms; shrink " +
            std::to_string(shrink_ms) + " ms)");
        continue;  // the step again, with the survivors
      }
      float want = 0;
      for (int m : members)
        want += static_cast<float>((m + 1) * (s + 1));
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (v[i] != want) {
          say("rank " + std::to_string(me) + ": step " + std::to_string(s) + " element " +
              std::to_string(i) + " is " + std::to_string(v[i]) + ", not " +
              std::to_string(want));
          return 1;
        }
      }
      total += v[0];
      ++s;
    }
    say("rank " + std::to_string(me) + ": done " + std::to_string(steps) + " steps, " +
        std::to_string(pg.size()) + " members, sums ok, state " + std::to_string(total));
    return 0;
  } catch (const std::exception& e) {
    say(std::string("error: ") + e.what());
    return 3;
  }
}
