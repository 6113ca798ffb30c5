// Builds the dependency graph of host steps (flow_graph.hpp).
#include "plan/flow_graph.hpp"

#include <algorithm>
#include <iterator>
#include <map>

namespace collie::flow {

using collectives::Combine;
using collectives::Range;

namespace {

// How much of `r` the merged ranges `written` cover: none, part or all.
enum class Cover { None, Part, All };

Cover covered(const std::map<std::size_t, std::size_t>& written, const Range& r) {
  if (r.count == 0) return Cover::All;
  const std::size_t end = r.offset + r.count;
  auto it = written.upper_bound(r.offset);
  if (it != written.begin()) {
    const auto before = std::prev(it);
    if (before->second > r.offset) return before->second >= end ? Cover::All : Cover::Part;
  }
  return it != written.end() && it->first < end ? Cover::Part : Cover::None;
}

void mark_written(std::map<std::size_t, std::size_t>& written, const Range& r) {
  if (r.count == 0) return;
  std::size_t begin = r.offset, end = r.offset + r.count;
  auto it = written.upper_bound(begin);
  if (it != written.begin() && std::prev(it)->second >= begin) --it;
  while (it != written.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = written.erase(it);
  }
  written.emplace(begin, end);
}

}  // namespace

void build(const collectives::Schedule& schedule, std::size_t first, std::size_t last,
           std::size_t segment, std::size_t world, Graph& graph, Strategy strategy) {
  auto& ops = graph.ops;
  ops.clear();
  graph.steps.clear();
  graph.ready.clear();
  segment = std::max<std::size_t>(segment, 1);
  // The snapshot space: the largest snapshot step's sends. And how many
  // ops there will be.
  std::size_t snapshot_count = 0;
  std::size_t op_count = 0;
  for (std::size_t s = first; s < last; ++s) {
    const auto& step = schedule.steps[s];
    op_count += step.copies.size();
    for (const auto* list : {&step.sends, &step.recvs})
      for (const auto& t : *list)
        op_count += (t.range.count + segment - 1) / segment;
    if (!collectives::receives_overlap_sends(step)) continue;
    std::size_t total = 0;
    for (const auto& t : step.sends)
      total += t.range.count;
    snapshot_count = std::max(snapshot_count, total);
  }
  graph.snapshot_count = snapshot_count;
  ops.reserve(op_count);
  // What earlier ops wrote (the initial contents, flow_graph.hpp).
  auto& written = graph.written;
  written.clear();
  graph.initial_exact = true;
  // Whether `r` is untouched by the writes so far (part of it: not exact).
  auto initial = [&](const Range& r) {
    const auto c = covered(written, r);
    if (c == Cover::Part) graph.initial_exact = false;
    return c == Cover::None;
  };

  auto& pairs = graph.pairs;  // (before, after)
  auto& seen = graph.seen;    // seen[d] == op: d is already a dependency of op
  pairs.clear();
  seen.assign(op_count, -1);
  auto dep = [&](std::int64_t d, std::uint32_t self, std::uint32_t skip_from) {
    if (d < 0 || d == self || static_cast<std::uint32_t>(d) >= skip_from) return;
    if (seen[static_cast<std::size_t>(d)] == self) return;
    seen[static_cast<std::size_t>(d)] = self;
    pairs.emplace_back(static_cast<std::uint32_t>(d), self);
    ++ops[self].blockers;
  };
  const bool pairwise = strategy == Strategy::Pairwise ||
                        (strategy == Strategy::Auto && op_count <= kPairwiseOps);
  auto& accesses = graph.accesses;
  accesses.clear();
  struct Cell {
    std::int64_t writer = -1;
    std::vector<std::uint32_t> readers;
  };
  std::map<std::size_t, Cell> cells;
  if (!pairwise) {
    cells.emplace(0, Cell{});
    cells.emplace(schedule.buffer_count + snapshot_count, Cell{});
  }
  auto split = [&](std::size_t at) {
    auto it = cells.lower_bound(at);
    if (it != cells.end() && it->first == at) return it;
    return cells.emplace_hint(it, at, std::prev(it)->second);
  };
  auto touch = [&](std::uint32_t self, const Range& r, bool writes, bool reads,
                   std::uint32_t skip_from) {
    if (pairwise) {
      for (const auto& a : accesses)
        if ((writes || a.writes) && a.begin < r.offset + r.count && r.offset < a.end)
          dep(a.op, self, skip_from);
      if (writes || reads) accesses.push_back({self, writes, r.offset, r.offset + r.count});
      return;
    }
    auto it = split(r.offset);
    const auto end = split(r.offset + r.count);
    for (; it != end; ++it) {
      auto& cell = it->second;
      dep(cell.writer, self, skip_from);
      if (writes) {
        for (auto d : cell.readers)
          dep(d, self, skip_from);
        cell.readers.clear();
        cell.writer = self;
      }
      if (reads) cell.readers.push_back(self);
    }
  };
  auto& last_send = graph.last_send;
  auto& last_recv = graph.last_recv;
  last_send.assign(world, -1);
  last_recv.assign(world, -1);
  auto in_line = [&](std::vector<std::int64_t>& line, int p, std::uint32_t self) {
    auto& prev = line[static_cast<std::size_t>(p)];
    if (prev >= 0) {
      ops[static_cast<std::size_t>(prev)].next_in_line = self;
      ++ops[self].blockers;
    }
    prev = self;
  };
  auto add = [&](const Op& op) {
    ops.push_back(op);
    return static_cast<std::uint32_t>(ops.size() - 1);
  };
  for (std::size_t s = first; s < last; ++s) {
    const auto& step = schedule.steps[s];
    StepOps fs;
    fs.snapshot = collectives::receives_overlap_sends(step);
    const auto step_first = static_cast<std::uint32_t>(ops.size());
    for (const auto& c : step.copies) {
      Op op;
      op.kind = Op::Copy;
      op.step = static_cast<std::uint32_t>(s);
      op.range = c.to;
      op.from = c.from;
      op.initial = initial(c.from);
      mark_written(written, c.to);
      const auto self = add(op);
      touch(self, c.from, false, true, UINT32_MAX);
      touch(self, c.to, true, false, UINT32_MAX);
    }
    const auto first_send = static_cast<std::uint32_t>(ops.size());
    std::size_t snap_used = 0;  // elements
    // One op per segment of transfer `t`.
    auto cut = [&](Op::Kind kind, const collectives::Transfer& t, std::size_t done) {
      Op op;
      op.kind = kind;
      op.step = static_cast<std::uint32_t>(s);
      op.peer = t.peer;
      op.range = {t.range.offset + done, std::min(segment, t.range.count - done)};
      op.snapshot = kind == Op::Send && fs.snapshot;
      op.reduce = kind == Op::Recv && t.combine == Combine::Reduce;
      return add(op);
    };
    for (const auto& t : step.sends) {
      for (std::size_t done = 0; done < t.range.count; done += segment) {
        const auto self = cut(Op::Send, t, done);
        const auto range = ops[self].range;
        ops[self].initial = initial(range);
        touch(self, range, false, true, UINT32_MAX);
        if (fs.snapshot) {
          ops[self].snap_at = snap_used;
          // It writes its part of the snapshot, then the transport reads it.
          touch(self, {schedule.buffer_count + snap_used, range.count}, true, true, UINT32_MAX);
          snap_used += range.count;
          ++fs.unposted_sends;
        }
        in_line(last_send, t.peer, self);
      }
    }
    fs.first_recv = static_cast<std::uint32_t>(ops.size());
    for (const auto& t : step.recvs) {
      for (std::size_t done = 0; done < t.range.count; done += segment) {
        const auto self = cut(Op::Recv, t, done);
        const auto range = ops[self].range;
        if (ops[self].reduce) ops[self].initial = initial(range);
        // A snapshot step's own sends read the snapshot, not the buffer:
        // its receives wait for them to be posted instead (above).
        touch(self, range, true, false, fs.snapshot ? first_send : UINT32_MAX);
        mark_written(written, range);
        if (fs.snapshot && fs.unposted_sends > 0) ++ops[self].blockers;
        in_line(last_recv, t.peer, self);
      }
    }
    fs.end = static_cast<std::uint32_t>(ops.size());
    fs.undone = fs.end - step_first;
    graph.steps.push_back(fs);
  }
  graph.unwritten.clear();
  std::size_t at = 0;
  for (const auto& [begin, end] : written) {
    if (begin >= schedule.buffer_count) break;
    if (begin > at) graph.unwritten.push_back({at, begin - at});
    at = std::max(at, end);
  }
  if (at < schedule.buffer_count) graph.unwritten.push_back({at, schedule.buffer_count - at});
  // The dependents of each op, grouped by op.
  auto& count = graph.count;
  count.assign(ops.size(), 0);
  for (const auto& [before, after] : pairs)
    ++count[before];
  std::uint32_t at_edge = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ops[i].first_edge = at_edge;
    ops[i].edges = 0;
    at_edge += count[i];
  }
  graph.edges.resize(pairs.size());
  for (const auto& [before, after] : pairs)
    graph.edges[ops[before].first_edge + ops[before].edges++] = after;
  for (std::uint32_t i = 0; i < ops.size(); ++i)
    if (ops[i].blockers == 0) graph.ready.push_back(i);
}

void copy_built(const Graph& built, Graph& graph) {
  graph.ops = built.ops;
  graph.steps = built.steps;
  graph.edges = built.edges;
  graph.ready = built.ready;
  graph.snapshot_count = built.snapshot_count;
  graph.initial_exact = built.initial_exact;
  graph.unwritten = built.unwritten;
}

}  // namespace collie::flow
