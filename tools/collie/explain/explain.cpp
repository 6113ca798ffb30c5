// `collie explain`: the real schedules, run symbolically
// (collectives/explain.hpp), shown as text and JSON; the html page is
// explain/html.cpp.
#include "explain.hpp"

#include "size_label.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::cli::explain {

namespace {

using nlohmann::ordered_json;

// "16 B", "85.3333 MiB": the bench's labels.
std::string bytes_label(std::size_t bytes) {
  return size_label(static_cast<double>(bytes));
}

std::string range_label(const cs::Range& r) {
  if (r.count == 1) return fmt::format("[{}]", r.offset);
  return fmt::format("[{}..{}]", r.offset, r.offset + r.count - 1);
}

bool with_index(const Request& r) {
  return r.collective != cs::Collective::Barrier;
}

std::string content_label(const Request& r, const std::vector<cs::Run>& runs) {
  std::string out;
  for (const auto& run : runs) {
    if (!out.empty()) out += " ";
    const auto label = cs::run_label(run, with_index(r));
    out += label.empty() ? "." : label;
  }
  return out;
}

ordered_json range_json(const cs::Range& r) {
  return ordered_json::array({r.offset, r.count});
}

ordered_json runs_json(const Request& req, const std::vector<cs::Run>& runs) {
  auto out = ordered_json::array();
  for (const auto& run : runs) {
    auto symbols = ordered_json::array();
    for (const auto& s : run.symbols) symbols.push_back(ordered_json::array({s.rank, s.index}));
    out.push_back({{"offset", run.offset},
                   {"count", run.count},
                   {"label", cs::run_label(run, with_index(req))},
                   {"symbols", symbols}});
  }
  return out;
}

ordered_json state_json(const Request& req, const std::vector<cs::RunBuffer>& state) {
  auto out = ordered_json::array();
  for (const auto& buffer : state) out.push_back(runs_json(req, buffer));
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

// What each rank's buffer holds, in words.
std::string layout_words(const Request& r) {
  const auto k = r.shape.count;
  const auto n = static_cast<std::size_t>(r.shape.world);
  switch (r.collective) {
    case cs::Collective::AllReduce:
    case cs::Collective::Reduce:
    case cs::Collective::Broadcast:
      return fmt::format("Each rank's buffer is its {} elements, where the result lands{}.", k,
                         r.collective == cs::Collective::AllReduce ? "" : " (the root's)");
    case cs::Collective::ReduceScatter:
      return fmt::format("Each rank's buffer is its input, {} blocks of {}; rank r's result is "
                         "block r.",
                         n, k);
    case cs::Collective::AllGather:
    case cs::Collective::Gather:
      return fmt::format("Each rank's buffer: [0..{}] the output, block j from rank j; [{}..{}] "
                         "its input.",
                         n * k - 1, n * k, (n + 1) * k - 1);
    case cs::Collective::Scatter:
      return fmt::format("Each rank's buffer: [0..{}] the root's input, block j for rank j; "
                         "[{}..{}] its output.",
                         n * k - 1, n * k, (n + 1) * k - 1);
    case cs::Collective::AllToAll:
      return fmt::format("Each rank's buffer: [0..{}] its input, block j for rank j; [{}..{}] its "
                         "output, block j from rank j.",
                         n * k - 1, n * k, 2 * n * k - 1);
    case cs::Collective::Barrier:
      return "Each rank has one token; a rank may leave once its token has heard from everyone.";
  }
  return "";
}

struct Style {
  bool color = false;
  std::string bold(const std::string& s) const { return color ? "\033[1m" + s + "\033[0m" : s; }
  std::string dim(const std::string& s) const { return color ? "\033[2m" + s + "\033[0m" : s; }
  std::string fresh(const std::string& s) const {
    return color ? "\033[1;32m" + s + "\033[0m" : s;
  }
};

// One line per rank (only `ranks`): a column per element when the buffer is
// small, else its runs. `changed[r]` marks the ranges written this step.
std::string state_table(const Request& req, const std::vector<cs::RunBuffer>& state,
                        const std::vector<int>& ranks,
                        const std::vector<std::vector<cs::Range>>& changed, const Style& style) {
  std::string out;
  std::size_t elements = 0;
  for (int r : ranks) {
    const auto& b = state[static_cast<std::size_t>(r)];
    if (!b.empty()) elements = std::max(elements, b.back().offset + b.back().count);
  }
  auto is_changed = [&](int r, std::size_t lo, std::size_t count) {
    if (changed.empty()) return false;
    for (const auto& range : changed[static_cast<std::size_t>(r)])
      if (cs::overlap(range, cs::Range{lo, count})) return true;
    return false;
  };
  if (elements <= 16) {
    // cells[rank][element]
    std::vector<std::vector<std::string>> cells;
    std::vector<std::size_t> width(elements, 0);
    for (std::size_t i = 0; i < elements; ++i)
      width[i] = fmt::format("[{}]", i).size();
    for (int r : ranks) {
      std::vector<std::string> row(elements, ".");
      for (const auto& run : state[static_cast<std::size_t>(r)]) {
        for (std::size_t i = 0; i < run.count; ++i) {
          cs::Run one{0, 1, run.symbols};
          for (auto& s : one.symbols) s.index += i;
          const auto label = cs::run_label(one, with_index(req));
          row[run.offset + i] = label.empty() ? "." : label;
        }
      }
      for (std::size_t i = 0; i < elements; ++i) width[i] = std::max(width[i], row[i].size());
      cells.push_back(std::move(row));
    }
    std::string header = "          ";
    for (std::size_t i = 0; i < elements; ++i)
      header += fmt::format("{:<{}}", fmt::format("[{}]", i), width[i] + 2);
    while (!header.empty() && header.back() == ' ') header.pop_back();
    out += style.dim(header) + "\n";
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      std::string line = fmt::format("  rank {:<3}", ranks[k]);
      for (std::size_t i = 0; i < elements; ++i) {
        const auto padded = fmt::format("{:<{}}", cells[k][i], width[i] + 2);
        line += is_changed(ranks[k], i, 1) ? style.fresh(cells[k][i]) +
                                                 padded.substr(cells[k][i].size())
                                           : padded;
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }
  for (int r : ranks) {
    std::string line = fmt::format("  rank {:<3}", r);
    bool first = true;
    for (const auto& run : state[static_cast<std::size_t>(r)]) {
      const auto label = cs::run_label(run, with_index(req));
      std::string cell = fmt::format("{} {}", range_label({run.offset, run.count}),
                                     label.empty() ? "." : label);
      if (is_changed(r, run.offset, run.count)) cell = style.fresh(cell);
      line += (first ? "" : " | ") + cell;
      first = false;
    }
    out += line + "\n";
  }
  return out;
}

std::string model_words(const Request& r) {
  const auto& m = r.model;
  auto words =
      fmt::format("{}alpha {} per message, beta {:.3g} GB/s per link,\n  gamma {:.3g} GB/s "
                  "reduced, delta {} per message posted",
                  r.shared_memory ? "shared memory: " : "", time_label(m.alpha), 1e-9 / m.beta,
                  1e-9 / m.gamma, time_label(m.delta));
  if (r.hosts && r.hosts->hosts() > 1)
    words += fmt::format(",\n  between hosts: {} and {:.3g} Gbit/s per host's link", time_label(m.host_alpha),
                         8e-9 / m.host_beta);
  if (m.crowding > 1)
    words += fmt::format(",\n  {:.3g} ranks per core (the crowded-host bound)", m.crowding);
  if (m.crowding > 1 && r.hosts && r.hosts->hosts() > 1)
    words += fmt::format(", a message between\n  hosts {} of a core's work at each end",
                         time_label(m.host_work_per_message));
  if (m.crowding > 1 && m.flow_bytes > 0 && r.collective == cs::Collective::AllReduce)
    words += fmt::format(", with the caches of this\n  project's machine ({} a core, {} shared)",
                         bytes_label(static_cast<std::size_t>(m.core_cache_bytes)),
                         bytes_label(static_cast<std::size_t>(m.cache_bytes)));
  return words;
}

std::string request_words(const Request& r) {
  std::string out = fmt::format("{} on {} rank{}", cs::collective_name(r.collective),
                                r.shape.world, r.shape.world == 1 ? "" : "s");
  if (r.hosts) out += " (" + cs::describe(*r.hosts) + ")";
  if (r.collective != cs::Collective::Barrier)
    out += fmt::format(", {} {} element{} per rank ({})", r.shape.count, r.dtype,
                       r.shape.count == 1 ? "" : "s", bytes_label(r.shape.count * r.element_bytes));
  if (cs::has_root(r.collective)) out += fmt::format(", root {}", r.shape.root);
  return out;
}

}  // namespace

std::string time_label(double seconds) {
  if (seconds < 1e-3) return fmt::format("{:.3g} us", seconds * 1e6);
  if (seconds < 1) return fmt::format("{:.3g} ms", seconds * 1e3);
  return fmt::format("{:.3g} s", seconds);
}

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

ordered_json compare_json(const Request& r) {
  auto out = ordered_json::array();
  for (auto a : cs::algorithms_for(r.collective)) out.push_back(cost_json(cost_of(r, a)));
  return out;
}

ordered_json to_json(const Request& r, const Run& run, bool compare) {
  const auto& e = run.explanation;
  ordered_json doc;
  doc["collective"] = cs::collective_name(r.collective);
  doc["algorithm"] = cs::algorithm_name(r.algorithm);
  doc["chosen_by_auto"] = r.automatic;
  doc["ranks"] = r.shape.world;
  doc["count"] = r.shape.count;
  doc["root"] = cs::has_root(r.collective) ? ordered_json(r.shape.root) : ordered_json(nullptr);
  doc["dtype"] = r.dtype;
  doc["element_bytes"] = r.element_bytes;
  doc["pieces"] = r.shape.pieces;
  doc["segment_bytes"] = r.segment_bytes;
  doc["hosts"] = r.hosts ? ordered_json(r.hosts->host_of) : ordered_json(nullptr);
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
    doc["auto"] = cs::algorithm_name(cs::auto_algorithm(r.collective, r.shape.world, r.shape.count,
                                                        r.element_bytes, r.segment_bytes, r.model,
                                                        r.hosts));
  }
  doc["check"] = run.check;
  return doc;
}

std::string to_text(const Request& r, const Run& run, bool color, bool full) {
  const Style style{color};
  const auto& e = run.explanation;
  const int n = r.shape.world;
  const bool all_ranks = n <= 8 || full;
  std::vector<int> shown;
  for (int rank = 0; rank < n; ++rank)
    if (all_ranks || rank < 2 || rank == n - 1 || (cs::has_root(r.collective) && rank == r.shape.root))
      shown.push_back(rank);

  std::string out = style.bold(fmt::format("{} with {}{}", request_words(r),
                                           cs::algorithm_name(r.algorithm),
                                           r.automatic ? " (Auto's choice)" : "")) +
                    fmt::format(": {} step{}", run.steps.size(), run.steps.size() == 1 ? "" : "s");
  if (r.shape.pieces > 1) out += fmt::format(", {} pipeline pieces", r.shape.pieces);
  out += "\n\n";
  std::string letters, numbers;
  for (int rank = 0; rank < std::min(n, 4); ++rank) {
    letters += (rank ? ", " : "") + cs::rank_letter(rank);
    numbers += fmt::format("{}{}", rank ? ", " : "", rank);
  }
  if (n > 4) {
    letters += ", ...";
    numbers += ", ...";
  }
  out += fmt::format("Legend: {} are ranks {}{}\n", letters, numbers, n > 4 ? "" : ".");
  if (with_index(r))
    out += "a2 is element 2 of rank 0's input; a2+c2 is the two combined by the op (sum, max,\n"
           "...); \".\" is an element nothing has reached yet.\n";
  else
    out += "a+c is a token that has heard from ranks 0 and 2.\n";
  if (r.hosts) {
    std::vector<std::string> each;
    for (int h = 0; h < r.hosts->hosts(); ++h)
      each.push_back(fmt::format("host {}: ranks {}", h, fmt::join(r.hosts->ranks_on(h), ", ")));
    out += fmt::format("Hosts ({}): {}.\n", cs::describe(*r.hosts), fmt::join(each, "; "));
  }
  out += layout_words(r) + "\n";
  if (!all_ranks)
    out += fmt::format("{} ranks: showing ranks {} (--full shows every rank).\n", n,
                       fmt::join(shown, ", "));
  out += "\n" + style.bold("before") + "\n" + state_table(r, e.initial, shown, {}, style);

  const std::size_t total = run.steps.size();
  const bool elide = total > 40 && !full;
  for (std::size_t i = 0; i < total; ++i) {
    if (elide && i == 20) {
      out += fmt::format("\n... steps 21 to {} left out (--full shows them)\n", total - 10);
    }
    if (elide && i >= 20 && i < total - 10) continue;
    const auto& st = run.steps[i];
    std::size_t bytes = 0;
    for (const auto& m : st.messages) bytes += m.to_range.count * r.element_bytes;
    out += "\n" + style.bold(fmt::format("step {}", st.number)) +
           fmt::format(": {} message{} ({})\n", st.messages.size(),
                       st.messages.size() == 1 ? "" : "s", bytes_label(bytes));
    std::vector<std::vector<cs::Range>> changed(static_cast<std::size_t>(n));
    for (const auto& c : st.copies) {
      changed[static_cast<std::size_t>(c.rank)].push_back(c.copy.to);
      if (!all_ranks) continue;
      out += fmt::format("  rank {} copies {} to {}\n", c.rank, range_label(c.copy.from),
                         range_label(c.copy.to));
    }
    for (const auto& m : st.messages) {
      changed[static_cast<std::size_t>(m.to)].push_back(m.to_range);
      if (!all_ranks) continue;
      std::string line = fmt::format("  rank {} -> rank {}: {} {}", m.from, m.to,
                                     range_label(m.from_range), content_label(r, m.content));
      if (m.to_range != m.from_range) line += fmt::format(" into {}", range_label(m.to_range));
      line += m.combine == cs::Combine::Reduce ? ", reduced" : ", copied";
      if (m.sent_in != st.number) line += fmt::format(" (sent in step {})", m.sent_in);
      out += line + "\n";
    }
    if (all_ranks) out += state_table(r, st.state, shown, changed, style);
  }
  if (!all_ranks && total > 0) {
    out += "\n" + style.bold("after the last step") + "\n" +
           state_table(r, run.explanation.final_state, shown, {}, style);
  }

  const auto cost = cost_of(r, r.algorithm);
  out += "\n" + style.bold("cost") + fmt::format(" (the alpha-beta model: {})\n", model_words(r));
  out += fmt::format("  {} step{}; modelled time {} (latency terms alone {},\n  bandwidth and "
                     "reduce terms alone {})\n",
                     cost.cost.steps, cost.cost.steps == 1 ? "" : "s", time_label(cost.cost.seconds),
                     time_label(cost.latency_seconds), time_label(cost.bandwidth_seconds));
  const auto& messages = cost.cost.rank_messages;
  const auto& bytes = cost.cost.rank_bytes;
  const bool same =
      std::adjacent_find(messages.begin(), messages.end(), std::not_equal_to<>()) == messages.end() &&
      std::adjacent_find(bytes.begin(), bytes.end(), std::not_equal_to<>()) == bytes.end();
  if (same) {
    out += fmt::format("  every rank sends {} message{}, {}\n", messages.front(),
                       messages.front() == 1 ? "" : "s", bytes_label(bytes.front()));
  } else {
    for (int rank : shown)
      out += fmt::format("  rank {} sends {} message{}, {}\n", rank,
                         messages[static_cast<std::size_t>(rank)],
                         messages[static_cast<std::size_t>(rank)] == 1 ? "" : "s",
                         bytes_label(bytes[static_cast<std::size_t>(rank)]));
  }
  out += "\n";
  if (run.check == "ok")
    out += fmt::format("Final state checked: every rank holds what {} must.\n",
                       cs::collective_name(r.collective));
  else
    out += fmt::format("FINAL STATE WRONG: {}\n", run.check);
  return out;
}

std::string compare_text(const Request& r) {
  const auto chosen = cs::auto_algorithm(r.collective, r.shape.world, r.shape.count,
                                         r.element_bytes, r.segment_bytes, r.model, r.hosts);
  std::string out = fmt::format("{}: every algorithm, on the alpha-beta model\n  ({})\n\n",
                                request_words(r), model_words(r));
  out += fmt::format("  {:<20} {:>6} {:>14} {:>12} {:>11} {:>11} {:>11}\n", "algorithm", "steps",
                     "messages/rank", "bytes/rank", "time", "latency", "bandwidth");
  for (auto a : cs::algorithms_for(r.collective)) {
    const auto c = cost_of(r, a);
    out += fmt::format("  {:<20} {:>6} {:>14} {:>12} {:>11} {:>11} {:>11}{}\n",
                       cs::algorithm_name(a), c.cost.steps, c.cost.messages,
                       bytes_label(c.cost.bytes), time_label(c.cost.seconds),
                       time_label(c.latency_seconds), time_label(c.bandwidth_seconds),
                       a == chosen ? "   <- Auto" : "");
  }
  out += fmt::format(
      "\nmessages/rank and bytes/rank: the most any rank sends. time: the model's; latency: its\n"
      "time with only alpha and delta; bandwidth: with only beta and gamma. Auto costs a call at\n"
      "its size rounded up to a power of two ({}) and picks the fastest.\n",
      bytes_label(cs::size_bucket(r.shape.count * r.element_bytes)));
  return out;
}

}  // namespace collie::cli::explain
