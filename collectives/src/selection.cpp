// The selection rules' grammar and the selection map (selection.hpp).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/collectives/cost.hpp>
#include <collie/collectives/selection.hpp>
#include <collie/environment.hpp>
#include <collie/error.hpp>

namespace collie::collectives {

namespace {

constexpr std::size_t kNoEnd = std::numeric_limits<std::size_t>::max();

std::vector<std::string_view> split(std::string_view text, char by) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const auto at = text.find(by, start);
    parts.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return parts;
    start = at + 1;
  }
}

// "LOW-HIGH", "LOW-" (no end), or, where `one_alone`, "N" (N to N). The
// bounds as read; nullopt where the text is not a range.
std::optional<std::pair<std::size_t, std::size_t>> range_of(std::string_view text, bool one_alone) {
  const auto dash = text.find('-');
  if (dash == std::string_view::npos) {
    if (!one_alone) return std::nullopt;
    const auto n = environment::size_in_bytes(text);
    if (!n) return std::nullopt;
    return std::pair{*n, *n};
  }
  const auto low = environment::size_in_bytes(text.substr(0, dash));
  const auto high_text = text.substr(dash + 1);
  const auto high =
      high_text.empty() ? std::optional(kNoEnd) : environment::size_in_bytes(high_text);
  if (!low || !high) return std::nullopt;
  return std::pair{*low, *high};
}

[[noreturn]] void refuse(std::string_view source, std::string_view rule, std::string_view token,
                         std::string_view what) {
  throw Error(fmt::format("{}: in '{}', '{}' {}", source, rule, token, what));
}

constexpr std::string_view kGrammar =
    "rules are COLLECTIVE:ALGORITHM[:LOW-HIGH bytes][:ranks=LOW-HIGH], for example "
    "all_reduce:recursive_doubling:0-64K,all_reduce:ring:64K-";

}  // namespace

SelectionRules parse_selection(std::string_view text, std::string_view source) {
  SelectionRules rules;
  for (const auto item : split(text, ',')) {
    if (item.empty()) continue;
    const auto fields = split(item, ':');
    if (fields.size() < 2)
      throw Error(fmt::format("{}: '{}' is not a rule: {}", source, item, kGrammar));
    SelectionRule rule;
    const auto c = parse_collective(fields[0]);
    if (!c) {
      std::vector<std::string_view> all;
      for (auto known : kCollectives)
        all.push_back(collective_name(known));
      refuse(source, item, fields[0],
             fmt::format("is no collective; collectives: {}", fmt::join(all, ", ")));
    }
    rule.collective = *c;
    const auto a = parse_algorithm(fields[1]);
    if (!a || (*a != Algorithm::Auto && !implements(*c, *a)))
      throw Error(
          fmt::format("{}: in '{}': {}", source, item, no_algorithm_message(*c, fields[1], true)));
    rule.algorithm = *a;
    bool sizes = false, ranks = false;
    for (std::size_t i = 2; i < fields.size(); ++i) {
      const auto field = fields[i];
      if (field.starts_with("ranks=")) {
        const auto r = range_of(field.substr(6), true);
        if (ranks) refuse(source, item, field, "is a second ranks range");
        if (!r || r->first < 1 || r->first > r->second ||
            r->first > static_cast<std::size_t>(rule.max_ranks) ||
            (r->second != kNoEnd && r->second > static_cast<std::size_t>(rule.max_ranks)))
          refuse(source, item, field,
                 "is not a range of ranks: ranks=LOW-HIGH (both in, LOW at least 1), "
                 "ranks=LOW- or ranks=N");
        rule.min_ranks = static_cast<int>(r->first);
        if (r->second != kNoEnd) rule.max_ranks = static_cast<int>(r->second);
        ranks = true;
      } else {
        const auto r = range_of(field, false);
        if (sizes) refuse(source, item, field, "is a second range of sizes");
        if (!r || (r->second != kNoEnd && r->first >= r->second))
          refuse(source, item, field,
                 fmt::format("is not a range of sizes: LOW-HIGH bytes, LOW less than HIGH, "
                             "with K, M or G (HIGH left out: no end); {}",
                             kGrammar));
        rule.min_bytes = r->first;
        rule.max_bytes = r->second;
        sizes = true;
      }
    }
    rules.push_back(rule);
  }
  return rules;
}

const SelectionRule* rule_for(const SelectionRules& rules, Collective c, std::size_t bytes,
                              int ranks) {
  for (const auto& rule : rules)
    if (rule.covers(c, bytes, ranks)) return &rule;
  return nullptr;
}

std::vector<SelectionRange> selection_map(const SelectionRules& rules, Collective c, int ranks,
                                          const std::function<Algorithm(std::size_t)>& automatic,
                                          std::size_t up_to) {
  // Where the answer may change: 0, every power of two up to up_to (Auto's
  // buckets), and every rule's bounds.
  std::vector<std::size_t> marks{0};
  for (std::size_t b = 1; b <= up_to && b != 0; b <<= 1)
    marks.push_back(b);
  for (const auto& rule : rules) {
    if (rule.collective != c) continue;
    marks.push_back(rule.min_bytes);
    if (rule.max_bytes != kNoEnd) marks.push_back(rule.max_bytes);
  }
  std::sort(marks.begin(), marks.end());
  marks.erase(std::unique(marks.begin(), marks.end()), marks.end());
  std::vector<SelectionRange> map;
  for (std::size_t i = 0; i < marks.size(); ++i) {
    const auto from = marks[i];
    const auto to = i + 1 < marks.size() ? marks[i + 1] : kNoEnd;
    const auto* rule = rule_for(rules, c, from, ranks);
    const bool by_rule = rule && rule->algorithm != Algorithm::Auto;
    const auto algorithm = by_rule ? rule->algorithm : automatic(std::min(from, up_to));
    if (!map.empty() && map.back().algorithm == algorithm && map.back().by_rule == by_rule)
      map.back().to = to;
    else
      map.push_back({from, to, algorithm, by_rule});
  }
  return map;
}

std::vector<SelectionRange> auto_selection_map(const SelectionRules& rules, Collective c, int ranks,
                                               std::size_t element_bytes, std::size_t segment_bytes,
                                               const CostModel& model,
                                               std::shared_ptr<const Hosts> hosts) {
  return selection_map(rules, c, ranks, [&](std::size_t bytes) {
    return auto_algorithm(c, ranks, std::max<std::size_t>(bytes / element_bytes, 1), element_bytes,
                          segment_bytes, model, hosts);
  });
}

std::string bytes_text(std::size_t bytes) {
  if (bytes != 0 && bytes % (std::size_t{1} << 30) == 0) return fmt::format("{}G", bytes >> 30);
  if (bytes != 0 && bytes % (std::size_t{1} << 20) == 0) return fmt::format("{}M", bytes >> 20);
  if (bytes != 0 && bytes % (std::size_t{1} << 10) == 0) return fmt::format("{}K", bytes >> 10);
  return fmt::format("{}", bytes);
}

std::string describe(const std::vector<SelectionRange>& map, std::string_view rule_name) {
  std::vector<std::string> parts;
  for (const auto& r : map)
    parts.push_back(fmt::format("{}-{} {}{}", bytes_text(r.from),
                                r.to == kNoEnd ? "" : bytes_text(r.to), algorithm_name(r.algorithm),
                                r.by_rule ? fmt::format(" ({})", rule_name) : ""));
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace collie::collectives
