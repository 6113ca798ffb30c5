// Which host each rank runs on (hosts.hpp).
#include <collie/collectives/hosts.hpp>
#include <collie/collectives/schedule.hpp>

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>

namespace collie::collectives {

int Hosts::hosts() const {
  int most = -1;
  for (int h : host_of)
    most = std::max(most, h);
  return most + 1;
}

std::vector<int> Hosts::ranks_on(int host) const {
  std::vector<int> out;
  for (std::size_t r = 0; r < host_of.size(); ++r)
    if (host_of[r] == host) out.push_back(static_cast<int>(r));
  return out;
}

std::vector<int> Hosts::ring_order() const {
  std::vector<int> order(host_of.size());
  for (std::size_t r = 0; r < order.size(); ++r)
    order[r] = static_cast<int>(r);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return host_of[static_cast<std::size_t>(a)] < host_of[static_cast<std::size_t>(b)];
  });
  return order;
}

int Hosts::most_per_host() const {
  std::vector<int> count(static_cast<std::size_t>(hosts()), 0);
  for (int h : host_of)
    ++count[static_cast<std::size_t>(h)];
  return count.empty() ? 0 : *std::max_element(count.begin(), count.end());
}

namespace {

// Each distinct key numbered in the order it first comes: one host each.
template <class Key>
Hosts numbered(const std::vector<Key>& keys) {
  Hosts out;
  std::map<Key, int> number;
  for (const auto& key : keys)
    out.host_of.push_back(number.emplace(key, static_cast<int>(number.size())).first->second);
  return out;
}

}  // namespace

Hosts hosts_from_names(const std::vector<std::string>& names) {
  return numbered(names);
}

Hosts uniform_hosts(int hosts, int ranks_per_host, bool round_robin) {
  if (hosts < 1 || ranks_per_host < 1)
    throw Error(fmt::format("{} hosts of {} ranks: both must be at least 1", hosts,
                            ranks_per_host));
  Hosts out;
  const int n = hosts * ranks_per_host;
  for (int r = 0; r < n; ++r)
    out.host_of.push_back(round_robin ? r % hosts : r / ranks_per_host);
  return out;
}

Hosts hosts_of_sizes(const std::vector<int>& sizes) {
  Hosts out;
  for (std::size_t h = 0; h < sizes.size(); ++h) {
    if (sizes[h] < 1)
      throw Error(fmt::format("host {} has {} ranks: every host needs at least one", h, sizes[h]));
    out.host_of.insert(out.host_of.end(), static_cast<std::size_t>(sizes[h]), static_cast<int>(h));
  }
  return out;
}

Hosts hosts_of_members(const Hosts& hosts, const std::vector<int>& members) {
  std::vector<int> theirs;
  for (int m : members)
    theirs.push_back(hosts.host_of.at(static_cast<std::size_t>(m)));
  return numbered(theirs);
}

std::string describe(const Hosts& hosts) {
  const int h = hosts.hosts();
  std::vector<int> sizes;
  for (int i = 0; i < h; ++i)
    sizes.push_back(static_cast<int>(hosts.ranks_on(i).size()));
  const bool even = std::all_of(sizes.begin(), sizes.end(), [&](int s) { return s == sizes[0]; });
  const auto order = hosts.ring_order();
  bool by_host = true;
  for (std::size_t i = 0; i < order.size(); ++i)
    by_host = by_host && order[i] == static_cast<int>(i);
  const std::string shape = even ? fmt::format("{} host{} x {} rank{}", h, h == 1 ? "" : "s",
                                               sizes.empty() ? 0 : sizes[0],
                                               !sizes.empty() && sizes[0] == 1 ? "" : "s")
                                 : fmt::format("{} hosts ({} ranks)", h, fmt::join(sizes, ", "));
  bool round_robin = !by_host;
  for (std::size_t r = 0; round_robin && r < hosts.host_of.size(); ++r)
    round_robin = hosts.host_of[r] == static_cast<int>(r) % h;
  return fmt::format("{}, {}", shape,
                     by_host ? "by host" : round_robin ? "round robin" : "ranks interleaved");
}

void check_hosts(const Shape& shape) {
  if (shape.hosts && static_cast<int>(shape.hosts->host_of.size()) != shape.world)
    throw Error(fmt::format("the hosts name {} ranks, but the group has {}",
                            shape.hosts->host_of.size(), shape.world));
}

std::vector<int> ring_order(const Shape& shape) {
  check_hosts(shape);
  if (shape.hosts) return shape.hosts->ring_order();
  std::vector<int> order(static_cast<std::size_t>(std::max(shape.world, 0)));
  for (std::size_t r = 0; r < order.size(); ++r)
    order[r] = static_cast<int>(r);
  return order;
}

}  // namespace collie::collectives
