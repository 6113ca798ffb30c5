// Whom a failed job's ranks blame (launch/blame.hpp).
#include "blame.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <string_view>

#include <collie/keys.hpp>

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

namespace {

// A torch program's world group under collie launch meets under torch's
// prefixes: on torch 1.13 torchelastic's agent store's ("/worker/attempt_<a>")
// then the group's ("default_pg"); torch 2.6 makes the agent store's client
// without a prefix and names the group "default_pg/0//cpu", other torch 2
// releases "0" then the device. Its blame keys, of this attempt's run
// (collie's run namespace names the attempt) and its latest generation;
// none if no rank blamed. (Read once, after a failure: the whole store's
// key list.)
std::vector<std::string> torch_blame_keys(store::Store& store, int attempt) {
  const auto agent = "worker/attempt_" + std::to_string(attempt) + "/";
  const auto this_run = std::string(keys::kRunPrefix) + std::to_string(attempt) + "/";
  std::map<std::string, std::vector<std::string>> by_group;  // namespace -> keys
  for (auto& name : store.list_keys("", 2s)) {
    const auto blame = name.rfind("/" + std::string(keys::kBlamePrefix));
    const auto run = name.find(this_run);
    if (blame == std::string::npos || run == std::string::npos || blame < run) continue;
    auto group = std::string_view(name).substr(0, run);
    while (group.starts_with("/")) group.remove_prefix(1);
    if (group.starts_with(agent)) group.remove_prefix(agent.size());
    if (!group.starts_with("default_pg") && !group.starts_with("0/")) continue;
    by_group[name.substr(0, blame)].push_back(name);
  }
  if (by_group.empty()) return {};
  // The latest generation ("…/collie/run/<a>/gen/<g>") sorts last but for
  // g of 10 and more; take the longest name, then the greatest.
  const auto latest = std::max_element(by_group.begin(), by_group.end(), [](auto& a, auto& b) {
    return a.first.size() != b.first.size() ? a.first.size() < b.first.size() : a.first < b.first;
  });
  return latest->second;
}

}  // namespace

std::optional<BlameVerdict> read_blames(store::Store& store, int attempt) {
  // Ranks that made their group again (destroy, then init) blame in that
  // group's namespace: the latest group, the last whose rank 0 published
  // its id, is the one that failed.
  int latest = 0;
  while (store.try_get(keys::run(attempt, latest + 1) + "/" + std::string(keys::kGroupId), 2s))
    ++latest;
  const auto prefix = keys::run(attempt, latest) + "/" + std::string(keys::kBlamePrefix);
  auto names = store.list_keys(prefix, 2s);
  if (names.empty()) names = torch_blame_keys(store, attempt);
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
