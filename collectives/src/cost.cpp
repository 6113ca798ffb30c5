#include <algorithm>

#include <collie/collectives/cost.hpp>

namespace collie::collectives {

namespace {

// One rank's CPU seconds for the crowded-host bound (cost.hpp): per segment
// sent or received, per byte sent or received, per byte reduced.
double cpu_work(const Schedule& schedule, std::size_t element_bytes, const CostModel& model) {
  const std::size_t segment = std::max<std::size_t>(1, model.segment_bytes);
  double work = 0;
  for (const auto& st : schedule.steps)
    for (const auto* list : {&st.sends, &st.recvs})
      for (const auto& t : *list) {
        const std::size_t b = t.range.count * element_bytes;
        work += static_cast<double>(std::max<std::size_t>(1, (b + segment - 1) / segment)) *
                    model.work_per_segment +
                static_cast<double>(b) * model.work_per_byte;
        if (list == &st.recvs && t.combine == Combine::Reduce)
          work += static_cast<double>(b) * model.gamma;
      }
  return work;
}

}  // namespace

Cost estimate(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
              const CostModel& model) {
  const auto n = static_cast<std::size_t>(shape.world);
  // Fitted to all_reduce only: on reduce_scatter and all_gather its ties
  // (the same bytes in the same segments) go to the ring where recursive
  // halving is 1.4x faster (4 ranks on 2 cores, 1 MiB).
  const bool crowded = model.crowding > 1 && c == Collective::AllReduce;
  std::vector<Schedule> schedules;
  Cost cost;
  double work = 0;  // every rank's CPU seconds, summed (crowded only)
  for (int r = 0; r < shape.world; ++r) {
    Shape s = shape;
    s.rank = r;
    schedules.push_back(make_schedule(c, a, s));
    std::size_t messages = 0, bytes = 0;
    for (const auto& st : schedules.back().steps) {
      messages += st.sends.size();
      for (const auto& t : st.sends) bytes += t.range.count * element_bytes;
    }
    if (crowded) work += cpu_work(schedules.back(), element_bytes, model);
    cost.steps = std::max(cost.steps, schedules.back().steps.size());
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
  run_schedules<double>(
      schedules, "estimate",
      [&](std::size_t r, std::size_t index) {
        double link = clock[r];  // this rank's outgoing link, busy until
        std::vector<double> arrivals;
        for (const auto& t : schedules[r].steps[index].sends) {
          link += model.delta + model.beta * bytes_of(t);
          arrivals.push_back(link + model.alpha);
        }
        send_end[r] = link;
        return arrivals;
      },
      [&](std::size_t r, std::size_t index, std::vector<double> arrivals) {
        const auto& recvs = schedules[r].steps[index].recvs;
        double end = send_end[r];
        double inbound = clock[r];  // this rank's incoming link, busy until
        for (std::size_t k = 0; k < recvs.size(); ++k) {
          inbound = std::max(inbound + model.beta * bytes_of(recvs[k]), arrivals[k]) + model.delta;
          if (recvs[k].combine == Combine::Reduce) inbound += model.gamma * bytes_of(recvs[k]);
          end = std::max(end, inbound);
        }
        clock[r] = end;
      });
  cost.seconds = *std::max_element(clock.begin(), clock.end());
  if (crowded)
    cost.seconds = std::max(cost.seconds, work / static_cast<double>(n) * model.crowding);
  return cost;
}

CostModel shared_memory_cost_model(double crowding) {
  CostModel m;
  m.crowding = crowding;
  m.alpha = crowding > 1 ? 5e-6 : 0.4e-6;
  m.beta = 1 / 6e9;
  m.delta = 0.3e-6;
  m.work_per_segment = 0.5e-6;
  m.work_per_byte = 0.1e-9;
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

Algorithm auto_algorithm(Collective c, int world, std::size_t count, std::size_t element_bytes,
                         std::size_t segment_bytes, const CostModel& model) {
  const auto& candidates = algorithms_for(c);
  if (candidates.size() == 1 || world <= 1) return candidates.front();
  const std::size_t representative = size_bucket(count * element_bytes) / element_bytes;
  Algorithm best = candidates.front();
  double best_seconds = 0;
  CostModel m = model;
  m.segment_bytes = segment_bytes;
  for (auto a : candidates) {
    const Shape shape{0, world, representative, 0,
                      pieces_for(representative * element_bytes, segment_bytes)};
    const double t = estimate(c, a, shape, element_bytes, m).seconds;
    // A tie (the crowded bound can cost two algorithms alike) goes to the
    // earlier one.
    if (a == candidates.front() || t < best_seconds * (1 - 1e-9)) {
      best = a;
      best_seconds = t;
    }
  }
  return best;
}

}  // namespace collie::collectives
