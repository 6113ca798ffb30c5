// The explanation behind `collie explain`: for every algorithm, world sizes
// 1 to 9 and awkward counts, it ends where the collective must end (whose
// contributions, and which elements), agrees with simulate(), and moves
// exactly the schedule's messages.
#include "support/catch.hpp"

#include <collie/collectives/explain.hpp>
#include <collie/error.hpp>

using namespace collie::collectives;

namespace {

std::vector<std::size_t> counts_for(Collective c, int world) {
  if (c == Collective::Barrier) return {1};
  const auto n = static_cast<std::size_t>(world);
  return {0, 1, n > 2 ? n - 1 : 2, n, 3 * n + 1, 37};
}

}  // namespace

TEST_CASE("every algorithm's explanation ends in the collective's final state, worlds 1 to 9",
          "[explain]") {
  for (auto c : kCollectives) {
    for (auto a : algorithms_for(c)) {
      for (int world = 1; world <= 9; ++world) {
        for (auto count : counts_for(c, world)) {
          for (int root : {0, world / 2, world - 1}) {
            if (!has_root(c) && root != 0) continue;
            for (int pieces : {1, 3}) {
              if (pieces > 1 && a != Algorithm::Ring) continue;
              const Shape shape{0, world, count, root, pieces};
              INFO(collective_name(c) << " " << algorithm_name(a) << " world " << world
                                      << " count " << count << " root " << root << " pieces "
                                      << pieces);
              std::vector<Schedule> schedules;
              std::size_t sends = 0;
              for (int r = 0; r < world; ++r) {
                Shape s = shape;
                s.rank = r;
                schedules.push_back(make_schedule(c, a, s));
                for (const auto& st : schedules.back().steps) sends += st.sends.size();
              }
              std::size_t steps = 0, received = 0, sent = 0;
              std::vector<RunBuffer> last = initial_runs(c, shape);
              const auto e = explain(c, a, shape, [&](const ExplainedStep& step) {
                    REQUIRE(step.number == ++steps);
                    received += step.messages.size();
                    sent += step.sent;
                    for (const auto& m : step.messages) {
                      // What a message carries is what its sender held then,
                      // and it lands where the receiver's schedule says.
                      const auto& t = schedules[static_cast<std::size_t>(m.to)]
                                          .steps[m.to_step]
                                          .recvs;
                      REQUIRE(std::any_of(t.begin(), t.end(), [&](const Transfer& x) {
                        return x.peer == m.from && x.range == m.to_range;
                      }));
                      REQUIRE(m.from_range.count == m.to_range.count);
                      REQUIRE(m.sent_in <= step.number);
                    }
                    last = step.state;
                  });
              REQUIRE(e.schedules.size() == static_cast<std::size_t>(world));
              REQUIRE(e.steps == steps);
              const auto& final_state = e.final_state;
              REQUIRE(final_state == last);
              REQUIRE(sent == sends);
              REQUIRE(received == sends);
              check_final_state(c, world, count, root, contributions(c, shape, final_state));
              check_final_symbols(c, shape, final_state);
              // The same contents simulate() computes, element by element.
              REQUIRE(contributions(c, shape, final_state) ==
                      simulate(schedules, initial_state(c, world, count, root)));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("the ring all_reduce explained on 4 ranks takes 2 (n - 1) steps, one message per rank "
          "each",
          "[explain]") {
  std::vector<std::size_t> per_step;
  explain(Collective::AllReduce, Algorithm::Ring, Shape{0, 4, 4, 0, 1},
          [&](const ExplainedStep& step) {
            per_step.push_back(step.messages.size());
          });
  REQUIRE(per_step == std::vector<std::size_t>(6, 4));
}

TEST_CASE("a wrong final state is caught: by contributions and by element index", "[explain]") {
  const Shape shape{0, 3, 3, 0, 1};
  auto state = explain(Collective::AllReduce, Algorithm::Ring, shape,
                       [](const ExplainedStep&) {})
                   .final_state;
  REQUIRE_NOTHROW(check_final_symbols(Collective::AllReduce, shape, state));
  auto missing = state;
  missing[1][0].symbols.pop_back();  // rank 1 lost a contribution
  REQUIRE_THROWS_AS(check_final_state(Collective::AllReduce, 3, 3, 0,
                                      contributions(Collective::AllReduce, shape, missing)),
                    collie::Error);
  REQUIRE_THROWS_WITH(check_final_symbols(Collective::AllReduce, shape, missing),
                      ContainsSubstring("rank 1 output element 0 holds a0+b0, expected a0+b0+c0"));
  // Rank 2's first element holds everyone's element 1 instead of element 0:
  // the right ranks, the wrong elements.
  auto shifted = state;
  for (auto& s : shifted[2].front().symbols) s.index += 1;
  REQUIRE_NOTHROW(check_final_state(Collective::AllReduce, 3, 3, 0,
                                    contributions(Collective::AllReduce, shape, shifted)));
  REQUIRE_THROWS_WITH(check_final_symbols(Collective::AllReduce, shape, shifted),
                      ContainsSubstring("rank 2 output element 0 holds a1+b1+c1, expected a0+b0+c0"));
  // Only the last element of a run wrong: split the run, spoil its tail.
  auto tail = state;
  tail[0] = RunBuffer{Run{0, 2, state[0][0].symbols}, Run{2, 1, {{0, 2}, {1, 2}}}};
  REQUIRE_THROWS_WITH(check_final_symbols(Collective::AllReduce, shape, tail),
                      ContainsSubstring("rank 0 output element 2"));
}

TEST_CASE("a barrier's token must hear from every rank", "[explain]") {
  const Shape shape{0, 5, 1, 0, 1};
  auto state = explain(Collective::Barrier, Algorithm::Dissemination, shape,
                       [](const ExplainedStep&) {})
                   .final_state;
  REQUIRE_NOTHROW(check_final_symbols(Collective::Barrier, shape, state));
  state[3][0].symbols.erase(
      std::remove_if(state[3][0].symbols.begin(), state[3][0].symbols.end(),
                     [](const Symbol& s) { return s.rank == 1; }),
      state[3][0].symbols.end());
  REQUIRE_THROWS_WITH(check_final_symbols(Collective::Barrier, shape, state),
                      ContainsSubstring("barrier: rank 3 has heard from 4 of 5 ranks only (0,2,3,4)"));
}

TEST_CASE("run labels: one element, a run, a reduction, ranks past z, a barrier", "[explain]") {
  REQUIRE(run_label(Run{0, 1, {{0, 2}}}) == "a2");
  REQUIRE(run_label(Run{0, 4, {{1, 0}}}) == "b[0..3]");
  REQUIRE(run_label(Run{0, 1, {{0, 2}, {2, 2}, {3, 2}}}) == "a2+c2+d2");
  REQUIRE(run_label(Run{0, 1, {{26, 3}}}) == "r26:3");
  REQUIRE(run_label(Run{0, 1, {}}).empty());
  REQUIRE(run_label(Run{0, 1, {{0, 0}, {1, 0}}}, false) == "a+b");
}
