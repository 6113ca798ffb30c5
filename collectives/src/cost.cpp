// The alpha-beta cost model and Auto's choice, run on the real schedules
// (cost.hpp).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>

#include <collie/collectives/cost.hpp>
#include <collie/error.hpp>

namespace collie::collectives {

namespace {

// One rank's CPU seconds for the crowded-host bound (cost.hpp): per segment
// sent or received, per byte sent or received, per byte reduced.
double cpu_work(const Schedule& schedule, const Shape& shape, std::size_t element_bytes,
                const CostModel& model) {
  const std::size_t segment = std::max<std::size_t>(1, model.segment_bytes);
  const auto* hosts = shape.hosts && shape.hosts->hosts() > 1 ? shape.hosts.get() : nullptr;
  const auto host_of = [&](int r) { return hosts->host_of(r); };
  double work = 0;
  for (const auto& st : schedule.steps)
    for (const auto* list : {&st.sends, &st.recvs})
      for (const auto& t : *list) {
        const std::size_t b = t.range.count * element_bytes;
        const auto segments =
            static_cast<double>(std::max<std::size_t>(1, (b + segment - 1) / segment));
        work += segments * model.work_per_segment + static_cast<double>(b) * model.work_per_byte;
        if (hosts && host_of(t.peer) != host_of(shape.rank))
          work += segments * model.host_work_per_message;
        if (list == &st.recvs && t.combine == Combine::Reduce)
          work += static_cast<double>(b) * model.gamma;
      }
  return work;
}

// The executor's data path replayed piece by piece (runtime/src/executor/
// flow_run.cpp): every send and receive is cut into pieces of flow_bytes,
// and an op waits only for the earlier ops that touch its elements (a read
// for the last write; a write for the last write and the reads since), for
// the op before it to or from the same peer, and a receive for the send it
// matches. Ops run as soon as they may, each rank's outgoing and incoming
// link carrying one at a time: so a tree's steps overlap, as they do when
// it runs. Then, from each rank's order, the bytes it touches that miss
// the cache: a byte last touched more than its share of the cache ago
// (cache_bytes / ranks) comes from memory, and so does its first touch
// when the rank's buffer is larger than the share. The schedules have
// passed run_schedules() (they run step by step), and every dependency
// points to an op posted earlier or to a send a receive matches, so the
// replay cannot stall; if it does, that is this replay's bug, and it says
// where rather than price the collective on a clock it did not finish.
struct Flow {
  double seconds = 0;        // when the last rank finishes
  std::vector<double> cold;  // [rank] bytes from memory
  std::vector<double> warm;  // [rank] bytes from the shared cache
};

Flow flow(Collective c, Algorithm a, const std::vector<Schedule>& schedules,
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
        for (const auto& t : *list) elements += t.range.count;
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
              for (auto reader : readers[k]) depend(reader, id);
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
      fail(fmt::format("rank {} sends {} pieces to rank {}, which receives {}", q / n,
                       sends.size(), q % n, count));
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
    for (auto d : op.dependents) release(d, op.done);
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
      for (std::size_t k = op.begin / block; k <= (op.end - 1) / block; ++k) last[k] = touched;
    }
  }
  return result;
}

}  // namespace

namespace {

Cost estimate_on(const std::vector<Schedule>& schedules, Collective c, Algorithm a,
                 const Shape& shape, std::size_t element_bytes, const CostModel& model) {
  const auto n = static_cast<std::size_t>(shape.world);
  const bool crowded = crowded_bound(model, c, shape.hosts && shape.hosts->hosts() > 1);
  Cost cost;
  double work = 0;  // every rank's CPU seconds, summed (crowded only)
  for (int r = 0; r < shape.world; ++r) {
    const auto& schedule = schedules[static_cast<std::size_t>(r)];
    const auto [messages, bytes] = sends_of(schedule, element_bytes);
    if (crowded) {
      Shape s = shape;
      s.rank = r;
      work += cpu_work(schedule, s, element_bytes, model);
    }
    cost.steps = std::max(cost.steps, schedule.steps.size());
    cost.messages = std::max(cost.messages, messages);
    cost.bytes = std::max(cost.bytes, bytes);
    cost.rank_messages.push_back(messages);
    cost.rank_bytes.push_back(bytes);
  }
  // Messages are their arrival times; a rank's clock is when its last step ended.
  std::vector<double> clock(n, 0.0);
  std::vector<double> send_end(n, 0.0);
  const auto bytes_of = [&](const Transfer& t) {
    return static_cast<double>(t.range.count * element_bytes);
  };
  // Several hosts: each host's link out and in, shared by its ranks.
  const bool hosts = shape.hosts && shape.hosts->hosts() > 1;
  const auto host_of = [&](std::size_t r) {
    return static_cast<std::size_t>(shape.hosts->host_of(static_cast<int>(r)));
  };
  // A host link's direction: busy until `free`; its bucket (cost.hpp's
  // host_burst_bytes) held `tokens` at `at`; `carried` bytes in all.
  struct Link {
    double free = 0, tokens = 0, at = 0, carried = 0;
  };
  std::vector<Link> host_out(hosts ? static_cast<std::size_t>(shape.hosts->hosts()) : 0,
                             Link{0, model.host_burst_bytes, 0, 0});
  std::vector<Link> host_in(host_out);
  // How long `bytes` starting at `start` keep `link` busy.
  const auto pass = [&](Link& link, double start, double bytes) {
    link.carried += bytes;
    if (model.host_burst_bytes <= 0) return model.host_beta * bytes;
    link.tokens = std::min(model.host_burst_bytes,
                           link.tokens + std::max(0.0, start - link.at) / model.host_beta);
    const double burst = std::min(bytes, link.tokens);
    link.tokens -= burst;
    const double took = model.beta * burst + model.host_beta * (bytes - burst);
    link.at = std::max(link.at, start + took);
    return took;
  };
  const auto across = [&](std::size_t r, int peer) {
    return hosts && host_of(r) != host_of(static_cast<std::size_t>(peer));
  };
  std::vector<double> arrivals;  // a step's messages: when each arrives
  run_schedules<double>(
      schedules, "estimate",
      [&](std::size_t r, std::size_t index) -> const std::vector<double>& {
        double link = clock[r];  // this rank's outgoing link, busy until
        arrivals.clear();
        for (const auto& t : schedules[r].steps[index].sends) {
          if (across(r, t.peer)) {
            link += model.delta;
            auto& out = host_out[host_of(r)];
            const double start = std::max(out.free, link);
            out.free = start + pass(out, start, bytes_of(t));
            arrivals.push_back(out.free + model.host_alpha);
          } else {
            link += model.delta + model.beta * bytes_of(t);
            arrivals.push_back(link + model.alpha);
          }
        }
        send_end[r] = link;
        return arrivals;
      },
      [&](std::size_t r, std::size_t index, const std::vector<double>& arrived) {
        const auto& recvs = schedules[r].steps[index].recvs;
        double end = send_end[r];
        double inbound = clock[r];  // this rank's incoming link, busy until
        for (std::size_t k = 0; k < recvs.size(); ++k) {
          if (across(r, recvs[k].peer)) {
            auto& in = host_in[host_of(r)];
            in.free = std::max(in.free + pass(in, in.free, bytes_of(recvs[k])), arrived[k]);
            inbound = std::max(inbound, in.free) + model.delta;
          } else {
            inbound =
                std::max(inbound + model.beta * bytes_of(recvs[k]), arrived[k]) + model.delta;
          }
          if (recvs[k].combine == Combine::Reduce) inbound += model.gamma * bytes_of(recvs[k]);
          end = std::max(end, inbound);
        }
        clock[r] = end;
      });
  cost.seconds = *std::max_element(clock.begin(), clock.end());
  // Through a bucket, back to back: no faster than the busiest link's
  // bytes at its rate (without one, the replay's links already are).
  for (const auto* links : {&host_out, &host_in})
    for (const auto& l : *links)
      cost.seconds = std::max(cost.seconds, l.carried * model.host_beta);
  // Crowded, the executor's overlap of steps and the cache decide between
  // algorithms that do the same work: the clock follows the bytes (flow()),
  // and the bound adds the bytes that miss the cache. (On one host: the
  // replay has no host links.)
  if (crowded && model.flow_bytes > 0 && !hosts) {
    const auto f = flow(c, a, schedules, element_bytes, model);
    cost.seconds = f.seconds;
    for (std::size_t r = 0; r < n; ++r)
      work += f.cold[r] * model.work_per_cold_byte + f.warm[r] * model.work_per_warm_byte;
  }
  // Crowded on several hosts, the cores' work does not hide under the
  // links' time: a message goes on the link after its sender's core has
  // sent it and is reduced when the receiver's core gets to it, and the
  // kernel's TCP path runs on the same crowded cores. The two add up
  // (docs/algorithms.md, "A crowded machine").
  if (crowded) {
    const double cores = work / static_cast<double>(n) * model.crowding;
    cost.seconds = hosts ? cost.seconds + cores : std::max(cost.seconds, cores);
  }
  return cost;
}

std::vector<Schedule> schedules_of(Collective c, Algorithm a, const Shape& shape) {
  std::vector<Schedule> schedules;
  schedules.reserve(static_cast<std::size_t>(shape.world));
  for (int r = 0; r < shape.world; ++r) {
    Shape s = shape;
    s.rank = r;
    schedules.push_back(make_schedule(c, a, s));
  }
  return schedules;
}

}  // namespace

Sends sends_of(const Schedule& schedule, std::size_t element_bytes) {
  Sends out;
  for (const auto& st : schedule.steps) {
    out.messages += st.sends.size();
    for (const auto& t : st.sends) out.bytes += t.range.count * element_bytes;
  }
  return out;
}

Cost estimate(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
              const CostModel& model) {
  return estimate_on(schedules_of(c, a, shape), c, a, shape, element_bytes, model);
}

std::vector<Cost> estimate(Collective c, Algorithm a, const Shape& shape,
                           std::size_t element_bytes, const std::vector<CostModel>& models) {
  const auto schedules = schedules_of(c, a, shape);
  std::vector<Cost> out;
  for (const auto& model : models)
    out.push_back(estimate_on(schedules, c, a, shape, element_bytes, model));
  return out;
}

bool crowded_bound(const CostModel& model, Collective c, bool hosts) {
  return model.crowding > 1 &&
         (c == Collective::AllReduce ||
          (hosts && (c == Collective::AllGather || c == Collective::ReduceScatter)));
}

CostModel shared_memory_cost_model(double crowding) {
  CostModel m;
  m.crowding = crowding;
  m.alpha = crowding > 1 ? 5e-6 : 0.4e-6;
  m.beta = 1 / 6e9;
  m.delta = 0.3e-6;
  m.work_per_segment = 0.5e-6;
  m.work_per_byte = 0.1e-9;
  // The cache terms and the clock that follows the bytes are fitted to TCP;
  // shared memory keeps the step clock and its own fit.
  m.flow_bytes = 0;
  m.work_per_warm_byte = m.work_per_cold_byte = 0;
  return m;
}

int pieces_for(std::size_t bytes, std::size_t segment_bytes) {
  const std::size_t p = (bytes + segment_bytes - 1) / segment_bytes;
  return static_cast<int>(std::clamp<std::size_t>(p, 1, 1024));
}

std::size_t size_bucket(std::size_t bytes) {
  std::size_t b = 1;
  while (b < bytes) b <<= 1;
  return b;
}

CostModel priced_as_called(Collective c, const CostModel& model) {
  CostModel m = model;
  if (c == Collective::Broadcast || c == Collective::Reduce) {
    m.host_burst_bytes = std::numeric_limits<double>::infinity();
    m.host_alpha = 0;
  }
  return m;
}

Algorithm auto_algorithm(Collective c, int world, std::size_t count, std::size_t element_bytes,
                         std::size_t segment_bytes, const CostModel& model,
                         std::shared_ptr<const Hosts> hosts) {
  const auto& candidates = algorithms_for(c);
  if (candidates.size() == 1 || world <= 1) return candidates.front();
  // two_level only where it is two levels: on one host it is a ring of
  // pairs (all_to_all: the pairwise exchange), on hosts of one rank a ring.
  const bool two_levels = hosts && hosts->hosts() > 1 && hosts->most_per_host() > 1;
  const auto made_for_hosts = [c](Algorithm a) { return algorithm_row(c, a)->made_for_hosts; };
  if (!two_levels && candidates.size() == 2 && made_for_hosts(candidates.back()))
    return candidates.front();
  const std::size_t representative = size_bucket(count * element_bytes) / element_bytes;
  Algorithm best = candidates.front();  // (where none is priced)
  double best_seconds = 0;
  bool priced = false;
  CostModel m = priced_as_called(c, model);
  m.segment_bytes = segment_bytes;
  for (auto a : candidates) {
    if (made_for_hosts(a) && !two_levels) continue;
    const Shape shape{0, world, representative, 0,
                      pieces_for(representative * element_bytes, segment_bytes), hosts};
    // A long replay without a closed form (all_to_all's, n^2 messages
    // either way) is not priced: the first candidate stands.
    const bool quick = replays_quickly(c, a, shape);
    if (!quick && !has_closed_form(c, a)) continue;
    const double t = quick ? estimate(c, a, shape, element_bytes, m).seconds
                           : formula_seconds(c, a, shape, element_bytes, m);
    // A tie (the crowded bound can cost two algorithms alike) goes to the
    // earlier one, except that one made for hosts (two_level) wins within 10%
    // of the best. halving_doubling halves within each host first, so it
    // moves the same bytes between hosts; crowded, its fewer messages cost
    // it 9% less on the model (256 KiB on 4 emulated hosts of 2 ranks: 4.8
    // ms against 5.3), where the two measure level (3.30-3.46 ms each, 3
    // interleaved rounds, either numbering; docs/algorithms.md).
    constexpr double kTwoLevelMargin = 1.1;
    const bool tie_goes_here = made_for_hosts(a) && t <= best_seconds * kTwoLevelMargin;
    if (!priced || t < best_seconds * (1 - 1e-9) || tie_goes_here) {
      best = a;
      best_seconds = t;
      priced = true;
    }
  }
  return best;
}

}  // namespace collie::collectives
