// `collie explain`: what the command computes once, for its three formats.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <collie/collectives/cost.hpp>
#include <collie/collectives/explain.hpp>
#include <collie/collectives/hosts.hpp>
#include <collie/collectives/selection.hpp>

namespace collie::cli::explain {

namespace cs = collectives;

// What the user asked, resolved and checked.
struct Request {
  cs::Collective collective = cs::Collective::AllReduce;
  cs::Algorithm algorithm = cs::Algorithm::Ring;  // never Auto: resolved
  bool automatic = false;                         // the user left it to Auto
  cs::Shape shape;                                // rank 0
  std::string dtype = "float32";
  std::size_t element_bytes = 4;
  std::size_t segment_bytes = 0;
  cs::CostModel model;
  bool shared_memory = false;  // the model is shared memory's (--transport shm)
  std::shared_ptr<const cs::Hosts> hosts;  // --hosts; null: not given
  // COLLIE_ALGO's rules, as the runtime would read them (selection.hpp):
  // --algo auto takes a rule's algorithm where one covers the call
  // (by_rule), and --compare prints the selection map.
  cs::SelectionRules rules;
  bool by_rule = false;
};

// One algorithm's cost, as the summary and --compare show it.
struct CostLine {
  cs::Algorithm algorithm;
  cs::Cost cost;             // the full model, with what each rank sends
  double latency_seconds;    // alpha and delta only
  double bandwidth_seconds;  // beta and gamma only
  // Priced in closed form, as Auto prices a ring or two_level whose replay
  // would pass cs::kReplaySteps (cost.hpp): then steps, messages and bytes
  // are rank 0's, and cost.rank_messages and rank_bytes are empty.
  bool closed_form = false;
};
CostLine cost_of(const Request& r, cs::Algorithm a);

// Every step of the explanation, kept (the formats that show steps cap the
// world at kMaxRanks, so this fits).
struct Run {
  cs::Explanation explanation;  // with the final state
  std::vector<cs::ExplainedStep> steps;
  std::string check;  // "ok", or why the final state is wrong
};
inline constexpr int kMaxRanks = 64;
// keep_states: keep every step's state (the summarised text needs only the
// final one: a big world's states of every step take gigabytes).
Run run(const Request& r, bool keep_states = true);

// The JSON document (schedule, initial state, steps, cost, check): also the
// data the html page animates.
nlohmann::ordered_json to_json(const Request& r, const Run& run, bool compare);
nlohmann::ordered_json compare_json(const Request& r);

// The terminal text; `color` adds ANSI colors; `full` shows every rank and
// step of a big explanation.
std::string to_text(const Request& r, const Run& run, bool color, bool full);
std::string compare_text(const Request& r);

// One self-contained page (no network): the JSON document and a script that
// draws it.
std::string to_html(const nlohmann::ordered_json& doc);

// "41.2 us", "1.31 ms".
std::string time_label(double seconds);

}  // namespace collie::cli::explain
