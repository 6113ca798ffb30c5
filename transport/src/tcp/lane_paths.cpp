// Which interfaces a pair's lanes leave from and reach (lane_paths.hpp).
#include "lane_paths.hpp"

#include <algorithm>

#include <collie/address.hpp>

namespace collie::transport::tcp {

std::vector<LanePath> lane_paths(const std::vector<std::string>& published,
                                 const std::string& primary, const std::vector<std::string>& mine,
                                 const RouteSource& route) {
  std::vector<LanePath> paths;
  if (published.empty()) return paths;
  paths.push_back({"", published.front()});
  for (std::size_t i = 1; i < published.size(); ++i) {
    const auto split = split_host_port(published[i]);
    if (!split) continue;
    const std::string host(split->host);
    if (host == primary || std::find(mine.begin(), mine.end(), host) != mine.end()) continue;
    const auto source = route(host);
    if (source.empty() || source == primary ||
        std::find(mine.begin(), mine.end(), source) == mine.end())
      continue;
    const bool taken = std::any_of(paths.begin(), paths.end(),
                                   [&](const LanePath& p) { return p.local == source; });
    if (!taken) paths.push_back({source, published[i]});
  }
  return paths;
}

}  // namespace collie::transport::tcp
