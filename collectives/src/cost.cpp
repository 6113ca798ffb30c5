#include <algorithm>

#include <collie/collectives/cost.hpp>

namespace collie::collectives {

Cost estimate(const Schedule& schedule, std::size_t element_bytes, const CostModel& model) {
  Cost cost;
  cost.steps = schedule.steps.size();
  for (const auto& step : schedule.steps) {
    std::size_t out = 0, in = 0, reduced = 0;
    for (const auto& t : step.sends)
      out += t.range.count * element_bytes;
    for (const auto& t : step.recvs) {
      in += t.range.count * element_bytes;
      if (t.combine == Combine::Reduce) reduced += t.range.count * element_bytes;
    }
    cost.messages += step.sends.size();
    cost.bytes += out;
    cost.seconds += model.alpha + model.beta * static_cast<double>(std::max(out, in)) +
                    model.gamma * static_cast<double>(reduced);
  }
  return cost;
}

Cost estimate(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
              const CostModel& model) {
  Cost worst;
  for (int r = 0; r < shape.world; ++r) {
    Shape s = shape;
    s.rank = r;
    const auto one = estimate(make_schedule(c, a, s), element_bytes, model);
    worst.seconds = std::max(worst.seconds, one.seconds);
    worst.steps = std::max(worst.steps, one.steps);
    worst.messages = std::max(worst.messages, one.messages);
    worst.bytes = std::max(worst.bytes, one.bytes);
  }
  return worst;
}

}  // namespace collie::collectives
