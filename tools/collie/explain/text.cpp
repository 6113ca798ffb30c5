// `collie explain`'s text: each step's table of what every rank holds, the
// summary and the comparison of algorithms (explain.hpp).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/transport/board.hpp>

#include "explain.hpp"
#include "words.hpp"

namespace collie::cli::explain {

namespace {

struct Style {
  bool color = false;
  std::string bold(const std::string& s) const { return color ? "\033[1m" + s + "\033[0m" : s; }
  std::string dim(const std::string& s) const { return color ? "\033[2m" + s + "\033[0m" : s; }
  std::string fresh(const std::string& s) const { return color ? "\033[1;32m" + s + "\033[0m" : s; }
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
          for (auto& s : one.symbols)
            s.index += i;
          const auto label = cs::run_label(one, with_index(req));
          row[run.offset + i] = label.empty() ? "." : label;
        }
      }
      for (std::size_t i = 0; i < elements; ++i)
        width[i] = std::max(width[i], row[i].size());
      cells.push_back(std::move(row));
    }
    std::string header = "          ";
    for (std::size_t i = 0; i < elements; ++i)
      header += fmt::format("{:<{}}", fmt::format("[{}]", i), width[i] + 2);
    while (!header.empty() && header.back() == ' ')
      header.pop_back();
    out += style.dim(header) + "\n";
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      std::string line = fmt::format("  rank {:<3}", ranks[k]);
      for (std::size_t i = 0; i < elements; ++i) {
        const auto padded = fmt::format("{:<{}}", cells[k][i], width[i] + 2);
        line += is_changed(ranks[k], i, 1)
                    ? style.fresh(cells[k][i]) + padded.substr(cells[k][i].size())
                    : padded;
      }
      while (!line.empty() && line.back() == ' ')
        line.pop_back();
      out += line + "\n";
    }
    return out;
  }
  for (int r : ranks) {
    std::string line = fmt::format("  rank {:<3}", r);
    bool first = true;
    for (const auto& run : state[static_cast<std::size_t>(r)]) {
      const auto label = cs::run_label(run, with_index(req));
      std::string cell =
          fmt::format("{} {}", range_label({run.offset, run.count}), label.empty() ? "." : label);
      if (is_changed(r, run.offset, run.count)) cell = style.fresh(cell);
      line += (first ? "" : " | ") + cell;
      first = false;
    }
    out += line + "\n";
  }
  return out;
}

}  // namespace

std::string to_text(const Request& r, const Run& run, bool color, bool full) {
  const Style style{color};
  const auto& e = run.explanation;
  const int n = r.shape.world;
  const bool all_ranks = n <= 8 || full;
  std::vector<int> shown;
  for (int rank = 0; rank < n; ++rank)
    if (all_ranks || rank < 2 || rank == n - 1 ||
        (cs::has_root(r.collective) && rank == r.shape.root))
      shown.push_back(rank);

  std::string out =
      style.bold(fmt::format("{} with {}{}", request_words(r), cs::algorithm_name(r.algorithm),
                             r.by_rule     ? " (COLLIE_ALGO's rule)"
                             : r.automatic ? " (Auto's choice)"
                                           : "")) +
      fmt::format(": {} step{}", run.steps.size(), run.steps.size() == 1 ? "" : "s");
  if (r.shape.pieces > 1) out += fmt::format(", {} pipeline pieces", r.shape.pieces);
  if (const auto* row = cs::algorithm_row(r.collective, r.algorithm))
    out += fmt::format("\n{}: {}", cs::algorithm_name(r.algorithm), row->description);
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
    out +=
        "a2 is element 2 of rank 0's input; a2+c2 is the two combined by the op (sum, max,\n"
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
    for (const auto& m : st.messages)
      bytes += m.to_range.count * r.element_bytes;
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
  out += fmt::format(
      "  {} step{}; modelled time {} (latency terms alone {},\n  bandwidth and "
      "reduce terms alone {})\n",
      cost.cost.steps, cost.cost.steps == 1 ? "" : "s", time_label(cost.cost.seconds),
      time_label(cost.latency_seconds), time_label(cost.bandwidth_seconds));
  const auto& messages = cost.cost.rank_messages;
  const auto& bytes = cost.cost.rank_bytes;
  const bool same =
      std::adjacent_find(messages.begin(), messages.end(), std::not_equal_to<>()) ==
          messages.end() &&
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
  bool closed = false;
  for (auto a : cs::algorithms_for(r.collective)) {
    const auto c = cost_of(r, a);
    closed = closed || c.closed_form;
    out += fmt::format("  {:<20} {:>6} {:>14} {:>12} {:>11} {:>11} {:>11}{}{}\n",
                       cs::algorithm_name(a), c.cost.steps, c.cost.messages,
                       bytes_label(c.cost.bytes), time_label(c.cost.seconds),
                       time_label(c.latency_seconds), time_label(c.bandwidth_seconds),
                       c.closed_form ? " *" : "", a == chosen ? "   <- Auto" : "");
  }
  out += "\n";
  for (auto a : cs::algorithms_for(r.collective))
    out += fmt::format("  {:<20} {}\n", cs::algorithm_name(a),
                       cs::algorithm_row(r.collective, a)->description);
  out += fmt::format(
      "\nmessages/rank and bytes/rank: the most any rank sends. time: the model's; latency: its\n"
      "time with only alpha and delta; bandwidth: with only beta and gamma. Auto costs a call at\n"
      "its size rounded up to a power of two ({}) and picks the fastest.\n",
      bytes_label(cs::size_bucket(r.shape.count * r.element_bytes)));
  // On one host the runtime may run none of these (board_call.hpp).
  const auto bytes = r.shape.count * r.element_bytes;
  if (r.shape.world > 1 && static_cast<std::size_t>(r.shape.world) <= transport::Board::kMostMembers &&
      (r.collective == cs::Collective::Barrier ||
       (r.collective == cs::Collective::AllReduce && bytes > 0 &&
        bytes <= transport::Board::kBytes)))
    out +=
        "Where every rank shares one host's memory, a call this small goes on the group's board\n"
        "instead: no schedule and no message (docs/transport.md, \"The board\").\n";
  if (closed)
    out += fmt::format(
        "*: priced in closed form, as Auto prices a ring or two_level whose replay would pass\n"
        "{} steps (docs/algorithms.md, \"Thousands of ranks\"); steps, messages and bytes are\n"
        "rank 0's.\n",
        cs::kReplaySteps);
  // The whole selection map at this shape: COLLIE_ALGO's rules where they
  // cover a size, Auto elsewhere (selection.hpp), as the runtime logs it.
  const auto map = cs::auto_selection_map(r.rules, r.collective, r.shape.world, r.element_bytes,
                                          r.segment_bytes, r.model, r.hosts);
  out += fmt::format("\nBy size, on {} rank{}: {}\n", r.shape.world, r.shape.world == 1 ? "" : "s",
                     cs::describe(map, "COLLIE_ALGO"));
  return out;
}

}  // namespace collie::cli::explain
