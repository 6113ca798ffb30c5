// `collie explain`: the real schedules, run symbolically
// (collectives/explain.hpp), and their cost (explain.hpp); the formats
// are text.cpp, json.cpp and html.cpp.
#include "explain.hpp"

#include <collie/error.hpp>

namespace collie::cli::explain {

CostLine cost_of(const Request& r, cs::Algorithm a) {
  CostLine line{a, {}, 0, 0};
  cs::CostModel latency = r.model, bandwidth = r.model;
  latency.beta = latency.gamma = latency.work_per_byte = latency.host_beta = 0;
  latency.work_per_warm_byte = latency.work_per_cold_byte = 0;
  bandwidth.alpha = bandwidth.delta = bandwidth.work_per_segment = bandwidth.host_alpha = 0;
  if (!cs::replays_quickly(r.collective, a, r.shape) && cs::has_closed_form(r.collective, a)) {
    line.closed_form = true;
    const auto schedule = cs::make_schedule(r.collective, a, r.shape);  // rank 0's
    const auto sends = cs::sends_of(schedule, r.element_bytes);
    line.cost.steps = schedule.steps.size();
    line.cost.messages = sends.messages;
    line.cost.bytes = sends.bytes;
    line.cost.seconds = cs::formula_seconds(r.collective, a, r.shape, r.element_bytes, r.model);
    line.latency_seconds =
        cs::formula_seconds(r.collective, a, r.shape, r.element_bytes, latency);
    line.bandwidth_seconds =
        cs::formula_seconds(r.collective, a, r.shape, r.element_bytes, bandwidth);
    return line;
  }
  const auto costs =
      cs::estimate(r.collective, a, r.shape, r.element_bytes, {r.model, latency, bandwidth});
  line.cost = costs[0];
  line.latency_seconds = costs[1].seconds;
  line.bandwidth_seconds = costs[2].seconds;
  return line;
}

Run run(const Request& r, bool keep_states) {
  Run out;
  out.explanation =
      cs::explain(r.collective, r.algorithm, r.shape, [&](const cs::ExplainedStep& step) {
        out.steps.push_back(step);
        if (!keep_states) out.steps.back().state.clear();
      });
  try {
    cs::check_final_symbols(r.collective, r.shape, out.explanation.final_state);
    out.check = "ok";
  } catch (const Error& e) {
    out.check = e.what();
  }
  return out;
}

}  // namespace collie::cli::explain
