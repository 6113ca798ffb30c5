// A torch group's name and its ranks' global numbers in errors
// (group_names.hpp).
#include "group_names.hpp"

#include <regex>
#include <stdexcept>

#include <fmt/format.h>

namespace collie_torch {

namespace {

// "0, 2, 5-9": ranks, runs of consecutive ones folded.
std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i + 1)
      out += fmt::format("-{}", ranks[j]);
    else if (j == i + 1)
      out += fmt::format(", {}", ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

GroupNames::GroupNames(std::vector<int> global_ranks) : global_(std::move(global_ranks)) {
  for (std::size_t r = 0; r < global_.size(); ++r)
    if (global_[r] != static_cast<int>(r)) identity_ = false;
  name_ =
      identity_ ? "world" : fmt::format("the torch group of global ranks {}", rank_list(global_));
}

std::string GroupNames::rewrite(const std::string& message) const {
  if (identity_) return message;
  static const std::regex on_world(R"(\bon world\b)");
  static const std::regex rank(R"(\b([Rr]ank) (\d+)\b)");
  const std::string named = std::regex_replace(message, on_world, fmt::format("on {}", name_));
  std::string out;
  auto begin = std::sregex_iterator(named.begin(), named.end(), rank);
  std::size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    out += named.substr(last, static_cast<std::size_t>(m.position()) - last);
    out += m.str();
    const int r = std::stoi(m[2].str());
    if (r >= 0 && r < static_cast<int>(global_.size()) && global_[static_cast<std::size_t>(r)] != r)
      out += fmt::format(" (global rank {})", global_[static_cast<std::size_t>(r)]);
    last = static_cast<std::size_t>(m.position() + m.length());
  }
  return out + named.substr(last);
}

std::exception_ptr GroupNames::rewrite(std::exception_ptr error) const {
  if (identity_ || !error) return error;
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(rewrite(e.what())));
  } catch (...) {
    return error;
  }
}

}  // namespace collie_torch
