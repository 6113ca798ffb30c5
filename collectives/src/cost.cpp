#include <algorithm>

#include <collie/collectives/cost.hpp>

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
  return cost;
}

}  // namespace collie::collectives
