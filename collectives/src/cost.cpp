#include <algorithm>
#include <deque>

#include <fmt/format.h>

#include <collie/collectives/cost.hpp>
#include <collie/error.hpp>

namespace collie::collectives {

Cost estimate(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
              const CostModel& model) {
  const auto n = static_cast<std::size_t>(shape.world);
  std::vector<Schedule> schedules;
  Cost cost;
  for (int r = 0; r < shape.world; ++r) {
    Shape s = shape;
    s.rank = r;
    schedules.push_back(make_schedule(c, a, s));
    std::size_t messages = 0, bytes = 0;
    for (const auto& st : schedules.back().steps) {
      messages += st.sends.size();
      for (const auto& t : st.sends) bytes += t.range.count * element_bytes;
    }
    cost.steps = std::max(cost.steps, schedules.back().steps.size());
    cost.messages = std::max(cost.messages, messages);
    cost.bytes = std::max(cost.bytes, bytes);
  }
  // Arrival times of the messages in flight, per (sender, receiver), in order.
  std::vector<std::deque<double>> queues(n * n);
  std::vector<std::size_t> next(n, 0);
  std::vector<double> clock(n, 0.0);
  std::vector<bool> sent(n, false);
  std::vector<double> send_end(n, 0.0);
  for (;;) {
    bool progress = false, done = true;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& s = schedules[r];
      if (next[r] == s.steps.size()) continue;
      done = false;
      const auto& step = s.steps[next[r]];
      const double start = clock[r];
      if (!sent[r]) {
        double link = start;  // this rank's outgoing link, busy until
        for (const auto& t : step.sends) {
          link += model.delta + model.beta * static_cast<double>(t.range.count * element_bytes);
          queues[r * n + static_cast<std::size_t>(t.peer)].push_back(link + model.alpha);
        }
        send_end[r] = link;
        sent[r] = true;
        progress = true;
      }
      bool ready = true;
      for (const auto& t : step.recvs) {
        const auto from = static_cast<std::size_t>(t.peer);
        const auto needed = static_cast<std::size_t>(std::count_if(
            step.recvs.begin(), step.recvs.end(), [&](const Transfer& u) { return u.peer == t.peer; }));
        if (queues[from * n + r].size() < needed) ready = false;
      }
      if (!ready) continue;
      double end = send_end[r];
      double inbound = start;  // this rank's incoming link, busy until
      for (const auto& t : step.recvs) {
        auto& q = queues[static_cast<std::size_t>(t.peer) * n + r];
        const double arrival = q.front();
        q.pop_front();
        const double bytes = static_cast<double>(t.range.count * element_bytes);
        inbound = std::max(inbound + model.beta * bytes, arrival) + model.delta;
        if (t.combine == Combine::Reduce) inbound += model.gamma * bytes;
        end = std::max(end, inbound);
      }
      clock[r] = end;
      ++next[r];
      sent[r] = false;
      progress = true;
    }
    if (done) break;
    if (!progress) throw Error(fmt::format("estimate: {} {} deadlocks", collective_name(c), algorithm_name(a)));
  }
  cost.seconds = *std::max_element(clock.begin(), clock.end());
  return cost;
}

}  // namespace collie::collectives
