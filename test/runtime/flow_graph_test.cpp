// The executor's dependency graph (runtime/src/plan/flow_graph.hpp),
// tested as the schedules are: a hand-derived case edge by edge, then every
// algorithm's schedules on many shapes against a reference that knows only
// which ops touch which elements.
#include <algorithm>
#include <vector>

#include "support/catch.hpp"
#include <fmt/format.h>

#include <collie/collectives/algorithms.hpp>

#include "plan/flow_graph.hpp"

namespace {

using collie::collectives::Combine;
using collie::collectives::Range;
using collie::collectives::Schedule;
using collie::collectives::Step;
using collie::flow::Graph;
using collie::flow::Op;
using collie::flow::Strategy;

std::vector<std::pair<std::uint32_t, std::uint32_t>> data_edges(const Graph& g) {
  std::vector<std::pair<std::uint32_t, std::uint32_t>> out;
  for (std::uint32_t i = 0; i < g.ops.size(); ++i)
    for (std::uint32_t e = g.ops[i].first_edge; e < g.ops[i].first_edge + g.ops[i].edges; ++e)
      out.emplace_back(i, g.edges[e]);
  std::sort(out.begin(), out.end());
  return out;
}

// One access of an op to the working buffer (or the snapshot space after it).
struct Access {
  Range range;
  bool writes;
  bool at_posting;  // over once the op is posted (a snapshot send's read of the buffer)
};

std::vector<Access> accesses(const Schedule& s, const Op& op) {
  switch (op.kind) {
    case Op::Copy:
      return {{op.from, false, false}, {op.range, true, false}};
    case Op::Send:
      if (!op.snapshot) return {{op.range, false, false}};
      return {{op.range, false, true},
              {{s.buffer_count + op.snap_at, op.range.count}, true, false}};
    case Op::Recv:
      return {{op.range, true, false}};
  }
  return {};
}

bool conflict(const Access& a, const Access& b) {
  return (a.writes || b.writes) && a.range.count > 0 && b.range.count > 0 &&
         a.range.offset < b.range.offset + b.range.count &&
         b.range.offset < a.range.offset + a.range.count;
}

// The ops that start only after op `from` is posted (posted: true) or done
// (false): its dependents in the graph, and theirs, whatever the kind of
// each later link (a dependent starts after its blocker is at least posted).
std::vector<bool> after(const Graph& g, std::size_t first, std::uint32_t from, bool posted) {
  const auto n = g.ops.size();
  std::vector<bool> seen(n, false);
  std::vector<std::uint32_t> todo;
  auto reach = [&](std::uint32_t i) {
    if (!seen[i]) {
      seen[i] = true;
      todo.push_back(i);
    }
  };
  auto successors = [&](std::uint32_t i, bool origin, auto&& visit) {
    const auto& op = g.ops[i];
    for (std::uint32_t e = op.first_edge; e < op.first_edge + op.edges; ++e)
      visit(g.edges[e]);  // after it is done
    if (origin && !posted) return;
    if (op.next_in_line >= 0) visit(static_cast<std::uint32_t>(op.next_in_line));
    // A snapshot step's receives wait for all its sends to be posted.
    if (op.kind == Op::Send && op.snapshot) {
      const auto& step = g.steps[op.step - first];
      for (std::uint32_t r = step.first_recv; r < step.end; ++r)
        visit(r);
    }
  };
  successors(from, true, reach);
  while (!todo.empty()) {
    const auto i = todo.back();
    todo.pop_back();
    successors(i, false, reach);
  }
  return seen;
}

// Every pair of ops that touch the same elements, one of them writing, is
// ordered: the later one starts after the earlier one is done (or posted,
// for a snapshot send's read of the buffer). Receives of a snapshot step
// need not wait for that step's sends, which read the snapshot. Edges only
// go forward, and blockers count every incoming link.
void check_orders_every_conflict(const Schedule& s, std::size_t first, const Graph& g,
                                 const std::string& what) {
  INFO(what);
  const auto n = static_cast<std::uint32_t>(g.ops.size());
  std::vector<std::uint32_t> blockers(n, 0);
  for (const auto& [a, b] : data_edges(g)) {
    if (a >= b) FAIL(fmt::format("edge {} -> {} goes backward", a, b));
    ++blockers[b];
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    const auto& op = g.ops[i];
    if (op.next_in_line >= 0) {
      if (op.next_in_line <= static_cast<std::int64_t>(i))
        FAIL(fmt::format("op {}'s next in line {} is not after it", i, op.next_in_line));
      ++blockers[static_cast<std::size_t>(op.next_in_line)];
    }
  }
  for (const auto& step : g.steps)
    if (step.snapshot && step.unposted_sends > 0)
      for (std::uint32_t r = step.first_recv; r < step.end; ++r)
        ++blockers[r];
  for (std::uint32_t i = 0; i < n; ++i)
    if (g.ops[i].blockers != blockers[i])
      FAIL(fmt::format("op {} has {} blockers, its links say {}", i, g.ops[i].blockers,
                       blockers[i]));
  std::vector<std::uint32_t> ready;
  for (std::uint32_t i = 0; i < n; ++i)
    if (blockers[i] == 0) ready.push_back(i);
  REQUIRE(g.ready == ready);

  std::vector<std::vector<Access>> touches;
  for (const auto& op : g.ops)
    touches.push_back(accesses(s, op));
  for (std::uint32_t a = 0; a < n; ++a) {
    const auto done = after(g, first, a, false);
    const auto posted = after(g, first, a, true);
    for (std::uint32_t b = a + 1; b < n; ++b) {
      const auto& later = g.ops[b];
      const bool same_snapshot_step = g.ops[a].kind == Op::Send && g.ops[a].snapshot &&
                                      later.kind == Op::Recv && later.step == g.ops[a].step;
      for (const auto& x : touches[a]) {
        for (const auto& y : touches[b]) {
          if (!conflict(x, y) || same_snapshot_step) continue;
          // (Not a REQUIRE per pair: millions of them are too slow under the sanitizers.)
          if (!(x.at_posting ? posted[b] : done[b]))
            FAIL(fmt::format("op {} (kind {}, step {}) and op {} (kind {}, step {}) are not "
                             "ordered",
                             a, static_cast<int>(g.ops[a].kind), g.ops[a].step, b,
                             static_cast<int>(later.kind), later.step));
        }
      }
    }
  }
}

// Which ops meet the initial contents, against a reference that counts,
// element by element, the writes of the ops before each: an op whose read
// range (a send's, a copy's source, a reducing receive's target) none of
// them wrote meets them; one that some but not all of them wrote makes the
// graph inexact; what no op writes is listed.
void check_initial(const Schedule& s, const Graph& g, const std::string& what) {
  INFO(what);
  std::vector<bool> written(s.buffer_count, false);
  bool exact = true;
  for (std::uint32_t i = 0; i < g.ops.size(); ++i) {
    const auto& op = g.ops[i];
    Range read{0, 0};
    if (op.kind == Op::Send) read = op.range;
    if (op.kind == Op::Copy) read = op.from;
    if (op.kind == Op::Recv && op.reduce) read = op.range;
    std::size_t before = 0;
    for (std::size_t e = read.offset; e < read.offset + read.count; ++e)
      before += written[e] ? 1 : 0;
    if (before > 0 && before < read.count) exact = false;
    const bool meets = read.count > 0 && before == 0;
    if (op.initial != meets)
      FAIL(fmt::format("op {} (kind {}, step {}): initial {}, the reference says {}", i,
                       static_cast<int>(op.kind), op.step, op.initial, meets));
    if (op.kind != Op::Send)
      for (std::size_t e = op.range.offset; e < op.range.offset + op.range.count; ++e)
        written[e] = true;
  }
  REQUIRE(g.initial_exact == exact);
  std::vector<Range> unwritten;
  for (std::size_t e = 0; e < s.buffer_count; ++e) {
    if (written[e]) continue;
    if (!unwritten.empty() && unwritten.back().offset + unwritten.back().count == e)
      ++unwritten.back().count;
    else
      unwritten.push_back({e, 1});
  }
  REQUIRE(g.unwritten == unwritten);
}

}  // namespace

TEST_CASE("flow graph: a two-rank ring, edge by edge", "[flow][pure]") {
  // Rank 0 of a ring all_reduce of 2 elements on 2 ranks, by hand: step 0
  // sends element 0 and reduces element 1 in; step 1 sends element 1 and
  // receives element 0.
  Schedule s;
  s.buffer_count = 2;
  Step first, second;
  collie::collectives::add_send(first, 1, {0, 1});
  collie::collectives::add_recv(first, 1, {1, 1}, Combine::Reduce);
  collie::collectives::add_send(second, 1, {1, 1});
  collie::collectives::add_recv(second, 1, {0, 1}, Combine::Copy);
  s.steps = {first, second};
  for (auto strategy : {Strategy::Pairwise, Strategy::Cells}) {
    Graph g;
    collie::flow::build(s, 0, 2, 1, 2, g, strategy);
    REQUIRE(g.ops.size() == 4);
    // ops: 0 send [0,1), 1 recv [1,2) reduce, 2 send [1,2), 3 recv [0,1).
    CHECK(g.ops[0].kind == Op::Send);
    CHECK(g.ops[1].kind == Op::Recv);
    CHECK(g.ops[1].reduce);
    CHECK(g.ops[3].kind == Op::Recv);
    CHECK_FALSE(g.ops[3].reduce);
    // The second send forwards what the first receive reduced; the second
    // receive overwrites what the first send reads.
    using Edges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;
    CHECK(data_edges(g) == Edges{{0, 3}, {1, 2}});
    // Sends to rank 1, and receives from it, are posted in order.
    CHECK(g.ops[0].next_in_line == 2);
    CHECK(g.ops[1].next_in_line == 3);
    CHECK(g.ready == std::vector<std::uint32_t>{0, 1});
    CHECK(g.steps.size() == 2);
    CHECK(g.snapshot_count == 0);
    // Out of place, the first send reads element 0 and the first receive
    // reduces into element 1 as the input holds them; the second send
    // forwards the sum, and the last receive overwrites.
    CHECK(g.ops[0].initial);
    CHECK(g.ops[1].initial);
    CHECK_FALSE(g.ops[2].initial);
    CHECK_FALSE(g.ops[3].initial);
    CHECK(g.initial_exact);
    CHECK(g.unwritten.empty());
  }
}

TEST_CASE("flow graph: a read of a range written in part is inexact, and what no op writes is "
          "listed",
          "[flow][pure]") {
  Schedule s;
  s.buffer_count = 6;
  Step first, second;
  collie::collectives::add_recv(first, 1, {0, 2}, Combine::Copy);
  collie::collectives::add_send(second, 1, {1, 2});  // element 1 written, element 2 not
  s.steps = {first, second};
  Graph g;
  collie::flow::build(s, 0, 2, 8, 2, g);
  CHECK_FALSE(g.initial_exact);
  CHECK(g.unwritten == std::vector<Range>{{2, 4}});
  check_initial(s, g, "by hand");
  // Cut into segments of one element, each read is wholly one or the other.
  collie::flow::build(s, 0, 2, 1, 2, g);
  CHECK(g.initial_exact);
  CHECK_FALSE(g.ops[2].initial);
  CHECK(g.ops[3].initial);
  check_initial(s, g, "by hand, one-element segments");
}

TEST_CASE("flow graph: a snapshot step's receives wait for its sends to be posted", "[flow][pure]") {
  // Recursive doubling's exchange: send the whole buffer, receive into it.
  Schedule s;
  s.buffer_count = 4;
  Step exchange;
  collie::collectives::add_send(exchange, 1, {0, 4});
  collie::collectives::add_recv(exchange, 1, {0, 4}, Combine::Reduce);
  s.steps = {exchange};
  for (auto strategy : {Strategy::Pairwise, Strategy::Cells}) {
    Graph g;
    collie::flow::build(s, 0, 1, 2, 2, g, strategy);
    REQUIRE(g.ops.size() == 4);  // two send segments, two receive segments
    CHECK(g.snapshot_count == 4);
    CHECK(g.steps[0].snapshot);
    CHECK(g.steps[0].unposted_sends == 2);
    CHECK(g.ops[0].snapshot);
    CHECK(g.ops[1].snap_at == 2);
    CHECK(data_edges(g).empty());
    // Each receive: the posting of the step's sends, and its place in line.
    CHECK(g.ops[2].blockers == 1);
    CHECK(g.ops[3].blockers == 2);
    check_orders_every_conflict(s, 0, g, "snapshot step");
  }
}

TEST_CASE("flow graph: every algorithm's schedules, both strategies, order every conflict",
          "[flow][pure]") {
  namespace cs = collie::collectives;
  int graphs = 0;
  for (auto c : cs::kCollectives) {
    for (auto a : cs::algorithms_for(c)) {
      // (Under the sanitizers, three of the worlds: two thirds of the time.)
      for (int world : COLLIE_TEST_SANITIZED ? std::vector<int>{1, 3, 8}
                                             : std::vector<int>{1, 2, 3, 4, 5, 8}) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{17}}) {
          for (int pieces : {1, 3}) {
            const int root = world > 2 ? 2 : 0;
            for (int rank = 0; rank < world; ++rank) {
              const auto s = cs::make_schedule(c, a, {rank, world, count, root, pieces});
              for (std::size_t segment : {std::size_t{1}, std::size_t{4}, std::size_t{1000}}) {
                Graph pairwise, cells, automatic;
                collie::flow::build(s, 0, s.steps.size(), segment, static_cast<std::size_t>(world),
                                    pairwise, Strategy::Pairwise);
                collie::flow::build(s, 0, s.steps.size(), segment, static_cast<std::size_t>(world),
                                    cells, Strategy::Cells);
                collie::flow::build(s, 0, s.steps.size(), segment, static_cast<std::size_t>(world),
                                    automatic);
                const auto what = fmt::format("{} {} world {} rank {} count {} pieces {} segment {}",
                                              cs::collective_name(c), cs::algorithm_name(a), world,
                                              rank, count, pieces, segment);
                check_orders_every_conflict(s, 0, pairwise, what + " pairwise");
                check_orders_every_conflict(s, 0, cells, what + " cells");
                check_initial(s, pairwise, what + " pairwise");
                check_initial(s, cells, what + " cells");
                // Auto is pairwise for a few ops, cells for many.
                const auto& expected =
                    pairwise.ops.size() <= collie::flow::kPairwiseOps ? pairwise : cells;
                INFO(what);
                REQUIRE(data_edges(automatic) == data_edges(expected));
                // The cells keep only each op's nearest predecessors.
                REQUIRE(data_edges(cells).size() <= data_edges(pairwise).size());
                ++graphs;
              }
            }
          }
        }
      }
    }
  }
  CHECK(graphs > 1000);
}

TEST_CASE("flow graph: the steps of a range run alone, numbered from the schedule", "[flow][pure]") {
  namespace cs = collie::collectives;
  const auto s = cs::make_schedule(cs::Collective::AllReduce, cs::Algorithm::Ring, {1, 4, 8, 0, 1});
  REQUIRE(s.steps.size() == 6);
  Graph g;
  collie::flow::build(s, 2, 4, 1, 4, g);
  REQUIRE(g.steps.size() == 2);
  for (const auto& op : g.ops) {
    CHECK(op.step >= 2);
    CHECK(op.step < 4);
  }
  // Nothing earlier in the range blocks its first sends and receives.
  CHECK_FALSE(g.ready.empty());
  check_orders_every_conflict(s, 2, g, "steps 2 to 4");
}
