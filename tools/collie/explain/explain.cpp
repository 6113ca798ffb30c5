// `collie explain`: the real schedules, run symbolically
// (collectives/explain.hpp), and their cost (explain.hpp); the formats
// are text.cpp, json.cpp and html.cpp.
#include "explain.hpp"

#include <collie/error.hpp>

namespace collie::cli::explain {

CostLine cost_of(const Request& r, cs::Algorithm a) {
  CostLine line{a, {}, 0, 0};
  line.cost = cs::estimate(r.collective, a, r.shape, r.element_bytes, r.model);
  cs::CostModel latency = r.model, bandwidth = r.model;
  latency.beta = latency.gamma = latency.work_per_byte = latency.host_beta = 0;
  latency.work_per_warm_byte = latency.work_per_cold_byte = 0;
  bandwidth.alpha = bandwidth.delta = bandwidth.work_per_segment = bandwidth.host_alpha = 0;
  line.latency_seconds = cs::estimate(r.collective, a, r.shape, r.element_bytes, latency).seconds;
  line.bandwidth_seconds =
      cs::estimate(r.collective, a, r.shape, r.element_bytes, bandwidth).seconds;
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
