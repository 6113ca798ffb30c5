// What `collie launch` says when an attempt fails (launch/summary.hpp).
#include "summary.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "child_process.hpp"
#include "rank_error_file.hpp"

namespace collie::cli {

ErrorFiles::ErrorFiles() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      (tmp != nullptr && *tmp != '\0' ? std::string(tmp) : std::string("/tmp")) +
      "/collie-launch-XXXXXX";
  if (mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
}

ErrorFiles::~ErrorFiles() {
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

std::string ErrorFiles::path(int attempt, int rank) const {
  if (dir_.empty()) return "";
  const auto dir =
      std::filesystem::path(dir_) / fmt::format("attempt-{}", attempt) / std::to_string(rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return (dir / "error.json").string();
}

std::string root_cause(const ErrorFiles& files, int attempt, const LocalRanks& ranks,
                       const LocalRank* first_failure) {
  std::optional<RankError> first;
  int who = -1;
  for (const auto& r : ranks.ranks()) {
    auto e = read_rank_error(files.path(attempt, r.rank));
    if (!e) continue;
    const bool earlier = !first || (e->timestamp != 0 && e->timestamp < first->timestamp) ||
                         (e->timestamp == first->timestamp && &r == first_failure);
    if (earlier) {
      first = std::move(e);
      who = r.rank;
    }
  }
  if (!first) return "";
  std::string text = fmt::format("rank {} raised {} (its error file, torch's @record)", who,
                                 first->message);
  if (!first->traceback.empty()) {
    // The traceback's last lines: where it was raised.
    std::vector<std::string> lines;
    std::size_t at = 0;
    while (at < first->traceback.size()) {
      const auto nl = std::min(first->traceback.find('\n', at), first->traceback.size());
      lines.push_back(first->traceback.substr(at, nl - at));
      at = nl + 1;
    }
    constexpr std::size_t kLines = 12;
    text += ":";
    for (std::size_t i = lines.size() > kLines ? lines.size() - kLines : 0; i < lines.size(); ++i)
      text += "\n  " + lines[i];
  }
  return text;
}

std::string rank_table(int node_rank, const LocalRanks& ranks, const LocalRank* first_failure,
                       int blamed) {
  std::string table = fmt::format("collie launch: ranks on node {}:\n", node_rank);
  for (const auto& r : ranks.ranks()) {
    std::string how = describe_wait_status(*r.status);
    if (r.stopped_by_launcher) how = "stopped by collie launch (" + how + ")";
    if (r.replaces >= 0) how += fmt::format(" (replaced pid {})", r.replaces);
    const char* mark = r.rank == blamed && r.replaces < 0 ? "   <- blamed by the others"
                       : &r != first_failure   ? ""
                       : blamed >= 0           ? "   <- exited first"
                                               : "   <- failed first";
    table += fmt::format("  rank {:>3}  pid {:>7}  {}{}\n", r.rank, r.pid, how, mark);
  }
  return table;
}

}  // namespace collie::cli
