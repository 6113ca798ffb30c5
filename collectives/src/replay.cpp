// The executor's data path replayed piece by piece (replay.hpp).
#include "replay.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::collectives {

Flow replay(Collective c, Algorithm a, const std::vector<Schedule>& schedules,
            std::size_t element_bytes, const CostModel& model) {
  constexpr std::size_t none = SIZE_MAX;
  const std::size_t n = schedules.size();
  // Pieces of flow_bytes (no larger than a segment), coarser where that
  // would make more than kMaxOps ops in all (many ranks, large buffers).
  constexpr std::size_t kMaxOps = std::size_t{1} << 18;
  std::size_t elements = 0;  // sent or received, every rank
  for (const auto& schedule : schedules)
    for (const auto& st : schedule.steps)
      for (const auto* list : {&st.sends, &st.recvs})
        for (const auto& t : *list)
          elements += t.range.count;
  const std::size_t seg = std::max<std::size_t>(
      {1, std::min<std::size_t>(model.segment_bytes, model.flow_bytes) / element_bytes,
       (elements + kMaxOps - 1) / kMaxOps});
  const std::size_t block = std::max<std::size_t>(1, seg / 4);
  struct Op {
    std::size_t rank, peer;
    bool send, reduce;
    std::size_t begin, end;    // elements
    std::size_t match = none;  // a send's receive
    std::vector<std::size_t> dependents;
    std::size_t pending = 0;  // dependencies not yet done
    double ready = 0, start = 0, done = 0;
  };
  std::vector<Op> ops;
  std::vector<std::vector<std::size_t>> rank_ops(n);
  // [src * n + dst]: sends, in order (only the pairs that talk)
  std::unordered_map<std::size_t, std::vector<std::size_t>> sent;
  const auto depend = [&](std::size_t before, std::size_t after) {
    ops[before].dependents.push_back(after);
    ++ops[after].pending;
  };
  for (std::size_t r = 0; r < n; ++r) {
    std::vector<std::size_t> last_to(n, none), last_from(n, none);
    const std::size_t blocks = schedules[r].buffer_count / block + 1;
    std::vector<std::size_t> writer(blocks, none);
    std::vector<std::vector<std::size_t>> readers(blocks);
    for (const auto& st : schedules[r].steps)
      for (const auto* list : {&st.sends, &st.recvs})
        for (const auto& t : *list) {
          const bool send = list == &st.sends;
          const auto p = static_cast<std::size_t>(t.peer);
          const std::size_t first = t.range.offset, last = first + t.range.count;
          for (std::size_t b = first;; b += seg) {
            const std::size_t id = ops.size();
            Op op{};
            op.rank = r;
            op.peer = p;
            op.send = send;
            op.reduce = !send && t.combine == Combine::Reduce;
            op.begin = b;
            op.end = std::min(last, b + seg);
            ops.push_back(std::move(op));
            rank_ops[r].push_back(id);
            auto& previous = send ? last_to[p] : last_from[p];
            if (previous != none) depend(previous, id);
            previous = id;
            for (std::size_t k = b / block; b < ops[id].end && k <= (ops[id].end - 1) / block;
                 ++k) {
              if (writer[k] != none) depend(writer[k], id);
              if (send) {
                readers[k].push_back(id);
                continue;
              }
              for (auto reader : readers[k])
                depend(reader, id);
              readers[k].clear();
              writer[k] = id;
            }
            if (send) sent[r * n + p].push_back(id);
            if (b + seg >= last) break;
          }
        }
  }
  // A receive's k-th piece from p is p's k-th piece to it; it waits for
  // that send's arrival. And a sender runs at most `window` pieces ahead of
  // its receiver (the sockets' buffers): its k-th piece to a peer waits for
  // the receive of its (k - window)-th.
  const std::size_t window = std::max<std::size_t>(
      1, static_cast<std::size_t>(model.window_bytes / static_cast<double>(seg * element_bytes)));
  const auto fail = [&](const std::string& what) {
    throw Error(fmt::format("estimate: replaying {}'s {} on {} ranks piece by piece: {}",
                            collective_name(c), algorithm_name(a), n, what));
  };
  std::unordered_map<std::size_t, std::size_t> matched;  // [src * n + dst]: sends matched so far
  for (std::size_t id = 0; id < ops.size(); ++id) {
    if (ops[id].send) continue;
    const std::size_t q = ops[id].peer * n + ops[id].rank;
    auto& to_here = sent[q];
    auto& count = matched[q];
    if (count == to_here.size())
      fail(fmt::format("rank {} receives more pieces from rank {} than it sends ({})", ops[id].rank,
                       ops[id].peer, to_here.size()));
    ops[to_here[count++]].match = id;
    ++ops[id].pending;
  }
  for (const auto& [q, sends] : sent) {
    const std::size_t count = matched.count(q) ? matched[q] : 0;
    if (count != sends.size())
      fail(fmt::format("rank {} sends {} pieces to rank {}, which receives {}", q / n, sends.size(),
                       q % n, count));
    for (std::size_t k = window; k < sends.size(); ++k)
      depend(ops[sends[k - window]].match, sends[k]);
  }
  // Ops in the order they may start; each link carries one at a time.
  using Entry = std::pair<double, std::size_t>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
  for (std::size_t id = 0; id < ops.size(); ++id)
    if (ops[id].pending == 0) queue.push({0.0, id});
  std::vector<double> out_free(n, 0.0), in_free(n, 0.0);
  Flow result;
  std::size_t finished = 0;
  const auto release = [&](std::size_t id, double when) {
    auto& d = ops[id];
    d.ready = std::max(d.ready, when);
    if (--d.pending == 0) queue.push({d.ready, id});
  };
  while (!queue.empty()) {
    const auto [ready, id] = queue.top();
    queue.pop();
    auto& op = ops[id];
    const double bytes = static_cast<double>((op.end - op.begin) * element_bytes);
    if (op.send) {
      op.start = std::max(ready, out_free[op.rank]);
      op.done = out_free[op.rank] = op.start + model.delta + model.beta * bytes;
      release(op.match, op.done + model.alpha);
    } else {
      op.start = std::max(ready, in_free[op.rank]);
      op.done = in_free[op.rank] = std::max(in_free[op.rank] + model.beta * bytes, ready) +
                                   model.delta + (op.reduce ? model.gamma * bytes : 0.0);
    }
    for (auto d : op.dependents)
      release(d, op.done);
    result.seconds = std::max(result.seconds, op.done);
    ++finished;
  }
  if (finished != ops.size()) {
    const auto stuck =
        std::find_if(ops.begin(), ops.end(), [](const auto& o) { return o.pending > 0; });
    fail(fmt::format(
        "stalled with {} of {} ops done; rank {}'s {} {} rank {} (elements [{}, {})) "
        "waits on {} more",
        finished, ops.size(), stuck->rank, stuck->send ? "send" : "receive",
        stuck->send ? "to" : "from", stuck->peer, stuck->begin, stuck->end, stuck->pending));
  }
  const double share = model.cache_bytes / static_cast<double>(n);
  result.cold.assign(n, 0.0);
  result.warm.assign(n, 0.0);
  const double core_share = model.core_cache_bytes / std::max(1.0, model.crowding);
  for (std::size_t r = 0; r < n; ++r) {
    auto order = rank_ops[r];
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t x, std::size_t y) { return ops[x].start < ops[y].start; });
    const double buffer = static_cast<double>(schedules[r].buffer_count * element_bytes);
    std::vector<double> last(schedules[r].buffer_count / block + 1, -1.0);
    double touched = 0;  // bytes this rank has sent or received so far
    for (auto id : order) {
      const auto& op = ops[id];
      if (op.end == op.begin) continue;
      for (std::size_t k = op.begin / block; k <= (op.end - 1) / block; ++k) {
        const std::size_t lo = std::max(op.begin, k * block),
                          hi = std::min(op.end, (k + 1) * block);
        const double distance = last[k] < 0 ? buffer : touched - last[k];
        if (distance > share)
          result.cold[r] += static_cast<double>((hi - lo) * element_bytes);
        else if (distance > core_share)
          result.warm[r] += static_cast<double>((hi - lo) * element_bytes);
      }
      touched += static_cast<double>((op.end - op.begin) * element_bytes);
      for (std::size_t k = op.begin / block; k <= (op.end - 1) / block; ++k)
        last[k] = touched;
    }
  }
  return result;
}

}  // namespace collie::collectives
