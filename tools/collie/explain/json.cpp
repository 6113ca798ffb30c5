// `collie explain --format json`: the document the html page reads too
// (explain.hpp).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "explain.hpp"
#include "words.hpp"

namespace collie::cli::explain {

using nlohmann::ordered_json;

namespace {

ordered_json range_json(const cs::Range& r) {
  return ordered_json::array({r.offset, r.count});
}

ordered_json runs_json(const Request& req, const std::vector<cs::Run>& runs) {
  auto out = ordered_json::array();
  for (const auto& run : runs) {
    auto symbols = ordered_json::array();
    for (const auto& s : run.symbols)
      symbols.push_back(ordered_json::array({s.rank, s.index}));
    out.push_back({{"offset", run.offset},
                   {"count", run.count},
                   {"label", cs::run_label(run, with_index(req))},
                   {"symbols", symbols}});
  }
  return out;
}

ordered_json state_json(const Request& req, const std::vector<cs::RunBuffer>& state) {
  auto out = ordered_json::array();
  for (const auto& buffer : state)
    out.push_back(runs_json(req, buffer));
  return out;
}

const char* combine_name(cs::Combine c) {
  return c == cs::Combine::Reduce ? "reduce" : "copy";
}

ordered_json cost_json(const CostLine& c) {
  return {{"algorithm", cs::algorithm_name(c.algorithm)},
          {"steps", c.cost.steps},
          {"messages_per_rank", c.cost.messages},
          {"bytes_per_rank", c.cost.bytes},
          {"seconds", c.cost.seconds},
          {"latency_seconds", c.latency_seconds},
          {"bandwidth_seconds", c.bandwidth_seconds},
          {"closed_form", c.closed_form},
          {"messages", c.cost.rank_messages},
          {"bytes", c.cost.rank_bytes}};
}

ordered_json model_json(const Request& r) {
  const auto& m = r.model;
  return {{"transport", r.shared_memory ? "shm" : "tcp"},
          {"alpha_seconds", m.alpha},
          {"beta_seconds_per_byte", m.beta},
          {"gamma_seconds_per_byte", m.gamma},
          {"delta_seconds", m.delta},
          {"ranks_per_core", std::max(1.0, m.crowding)},
          {"work_per_segment_seconds", m.work_per_segment},
          {"work_per_byte_seconds", m.work_per_byte},
          {"work_per_warm_byte_seconds", m.work_per_warm_byte},
          {"work_per_cold_byte_seconds", m.work_per_cold_byte},
          {"core_cache_bytes", m.core_cache_bytes},
          {"cache_bytes", m.cache_bytes}};
}

}  // namespace

ordered_json compare_json(const Request& r) {
  auto out = ordered_json::array();
  for (auto a : cs::algorithms_for(r.collective))
    out.push_back(cost_json(cost_of(r, a)));
  return out;
}

ordered_json to_json(const Request& r, const Run& run, bool compare) {
  const auto& e = run.explanation;
  ordered_json doc;
  doc["collective"] = cs::collective_name(r.collective);
  doc["algorithm"] = cs::algorithm_name(r.algorithm);
  if (const auto* row = cs::algorithm_row(r.collective, r.algorithm))
    doc["description"] = row->description;
  doc["chosen_by_auto"] = r.automatic;
  doc["ranks"] = r.shape.world;
  doc["count"] = r.shape.count;
  doc["root"] = cs::has_root(r.collective) ? ordered_json(r.shape.root) : ordered_json(nullptr);
  doc["dtype"] = r.dtype;
  doc["element_bytes"] = r.element_bytes;
  doc["pieces"] = r.shape.pieces;
  doc["segment_bytes"] = r.segment_bytes;
  doc["hosts"] = r.hosts ? ordered_json(r.hosts->host_of()) : ordered_json(nullptr);
  auto legend = ordered_json::array();
  for (int rank = 0; rank < r.shape.world; ++rank)
    legend.push_back({{"rank", rank}, {"letter", cs::rank_letter(rank)}});
  doc["legend"] = legend;
  doc["layout_words"] = layout_words(r);
  auto layouts = ordered_json::array();
  auto schedules = ordered_json::array();
  for (int rank = 0; rank < r.shape.world; ++rank) {
    cs::Shape s = r.shape;
    s.rank = rank;
    const auto l = cs::layout(r.collective, s);
    layouts.push_back({{"rank", rank},
                       {"buffer", l.buffer_count},
                       {"input", range_json(l.input)},
                       {"output", range_json(l.output)}});
    auto steps = ordered_json::array();
    for (const auto& st : e.schedules[static_cast<std::size_t>(rank)].steps) {
      auto sends = ordered_json::array(), recvs = ordered_json::array(),
           copies = ordered_json::array();
      for (const auto& t : st.sends)
        sends.push_back({{"peer", t.peer}, {"offset", t.range.offset}, {"count", t.range.count}});
      for (const auto& t : st.recvs)
        recvs.push_back({{"peer", t.peer},
                         {"offset", t.range.offset},
                         {"count", t.range.count},
                         {"combine", combine_name(t.combine)}});
      for (const auto& c : st.copies)
        copies.push_back({{"from", range_json(c.from)}, {"to", range_json(c.to)}});
      steps.push_back({{"copies", copies}, {"sends", sends}, {"recvs", recvs}});
    }
    schedules.push_back(steps);
  }
  doc["layout"] = layouts;
  doc["schedule"] = schedules;
  doc["initial"] = state_json(r, e.initial);
  auto steps = ordered_json::array();
  for (const auto& st : run.steps) {
    auto copies = ordered_json::array(), messages = ordered_json::array();
    for (const auto& c : st.copies)
      copies.push_back({{"rank", c.rank},
                        {"rank_step", c.step},
                        {"from", range_json(c.copy.from)},
                        {"to", range_json(c.copy.to)}});
    for (const auto& m : st.messages)
      messages.push_back({{"from", m.from},
                          {"to", m.to},
                          {"from_step", m.from_step},
                          {"to_step", m.to_step},
                          {"from_range", range_json(m.from_range)},
                          {"to_range", range_json(m.to_range)},
                          {"combine", combine_name(m.combine)},
                          {"sent_in", m.sent_in},
                          {"bytes", m.to_range.count * r.element_bytes},
                          {"content", content_label(r, m.content)}});
    steps.push_back({{"step", st.number},
                     {"sent", st.sent},
                     {"copies", copies},
                     {"messages", messages},
                     {"state", state_json(r, st.state)}});
  }
  doc["steps"] = steps;
  ordered_json cost = cost_json(cost_of(r, r.algorithm));
  cost["model"] = model_json(r);
  doc["cost"] = cost;
  if (compare) {
    doc["compare"] = compare_json(r);
    doc["auto"] =
        cs::algorithm_name(cs::auto_algorithm(r.collective, r.shape.world, r.shape.count,
                                              r.element_bytes, r.segment_bytes, r.model, r.hosts));
  }
  doc["check"] = run.check;
  return doc;
}

}  // namespace collie::cli::explain
