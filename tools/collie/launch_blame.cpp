// Whom a failed job's ranks blame (launch_blame.hpp).
#include "launch_blame.hpp"

#include <algorithm>
#include <chrono>

#include <collie/store/keys.hpp>

namespace collie::cli {

using namespace std::chrono_literals;

std::optional<BlameVerdict> judge_blames(
    const std::map<int, std::pair<int, std::string>>& records) {
  std::map<int, std::vector<std::pair<int, std::string>>> by_blamed;
  std::map<int, int> blames;  // blamer -> blamed
  for (const auto& [blamer, record] : records) {
    const auto& [blamed, said] = record;
    if (blamed == blamer) continue;
    by_blamed[blamed].emplace_back(blamer, said);
    blames[blamer] = blamed;
  }
  if (by_blamed.empty()) return std::nullopt;
  auto end_of = [&](int r) {
    for (std::size_t hops = 0; hops <= blames.size(); ++hops) {
      const auto next = blames.find(r);
      if (next == blames.end()) return r;
      r = next->second;
    }
    return -1;  // a cycle: no end
  };
  std::map<int, std::vector<std::pair<int, std::string>>> by_end;
  for (const auto& [blamed, who] : by_blamed) {
    const int end = end_of(blamed);
    auto& list = by_end[end >= 0 ? end : blamed];
    list.insert(list.end(), who.begin(), who.end());
  }
  // Those who blamed it directly first (the one quoted), then by rank.
  for (auto& [end, list] : by_end) {
    std::sort(list.begin(), list.end(), [&, e = end](const auto& a, const auto& b) {
      const bool da = blames[a.first] == e, db = blames[b.first] == e;
      return da != db ? da : a.first < b.first;
    });
  }
  const auto most = std::max_element(by_end.begin(), by_end.end(), [](auto& a, auto& b) {
    return a.second.size() < b.second.size();
  });
  BlameVerdict v;
  v.culprit = most->first;
  for (const auto& [r, text] : most->second)
    v.blamers.push_back(r);
  std::sort(v.blamers.begin(), v.blamers.end());
  v.quoted = most->second.front().first;
  v.said = most->second.front().second;
  return v;
}

std::optional<BlameVerdict> read_blames(store::Store& store, int attempt) {
  // Ranks that made their group again (destroy, then init) blame in that
  // group's namespace: the latest group, the last whose rank 0 published
  // its id, is the one that failed.
  int latest = 0;
  while (store.try_get(keys::run(attempt, latest + 1) + "/" + std::string(keys::kGroupId), 2s))
    ++latest;
  const auto prefix = keys::run(attempt, latest) + "/" + std::string(keys::kBlamePrefix);
  const auto names = store.list_keys(prefix, 2s);
  if (names.empty()) return std::nullopt;
  const auto values = store.multi_get(names, 2s);
  std::map<int, std::pair<int, std::string>> records;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const int blamer = keys::blamer_of(names[i]);
    const auto blame = keys::parse_blame(values[i]);
    if (blamer < 0 || !blame) continue;
    records[blamer] = {blame->blamed, blame->said};
  }
  return judge_blames(records);
}

}  // namespace collie::cli
