// Which host each rank runs on (hosts.hpp).
#include <collie/collectives/hosts.hpp>
#include <collie/collectives/schedule.hpp>

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>

namespace collie::collectives {

Hosts::Hosts(std::vector<int> host_of) : host_of_(std::move(host_of)) {
  const auto n = host_of_.size();
  for (std::size_t r = 0; r < n; ++r) {
    const int h = host_of_[r];
    if (h < 0 || static_cast<std::size_t>(h) >= n)
      throw Error(fmt::format("rank {}'s host is numbered {}: hosts are numbered 0 to {}", r, h,
                              n - 1));
    if (static_cast<std::size_t>(h) >= members_.size())
      members_.resize(static_cast<std::size_t>(h) + 1);
    local_.push_back(static_cast<int>(members_[static_cast<std::size_t>(h)].size()));
    members_[static_cast<std::size_t>(h)].push_back(static_cast<int>(r));
  }
  for (std::size_t h = 0; h < members_.size(); ++h)
    if (members_[h].empty())
      throw Error(fmt::format("host {} has no rank, though host {} has: hosts are numbered "
                              "without gaps", h, members_.size() - 1));
  position_.resize(n);
  for (const auto& on : members_) {
    most_ = std::max(most_, static_cast<int>(on.size()));
    for (int r : on) {
      position_[static_cast<std::size_t>(r)] = static_cast<int>(order_.size());
      by_host_ = by_host_ && r == static_cast<int>(order_.size());
      order_.push_back(r);
    }
  }
}

Hosts Hosts::one_per_rank(int world) {
  std::vector<int> each(static_cast<std::size_t>(std::max(world, 0)));
  for (std::size_t r = 0; r < each.size(); ++r)
    each[r] = static_cast<int>(r);
  return Hosts(std::move(each));
}

namespace {

// Each distinct key numbered in the order it first comes: one host each.
template <class Key>
Hosts numbered(const std::vector<Key>& keys) {
  std::vector<int> host_of;
  std::map<Key, int> number;
  for (const auto& key : keys)
    host_of.push_back(number.emplace(key, static_cast<int>(number.size())).first->second);
  return Hosts(std::move(host_of));
}

}  // namespace

Hosts hosts_from_names(const std::vector<std::string>& names) {
  return numbered(names);
}

Hosts uniform_hosts(int hosts, int ranks_per_host, bool round_robin) {
  if (hosts < 1 || ranks_per_host < 1)
    throw Error(fmt::format("{} hosts of {} ranks: both must be at least 1", hosts,
                            ranks_per_host));
  std::vector<int> host_of;
  const int n = hosts * ranks_per_host;
  for (int r = 0; r < n; ++r)
    host_of.push_back(round_robin ? r % hosts : r / ranks_per_host);
  return Hosts(std::move(host_of));
}

Hosts hosts_of_sizes(const std::vector<int>& sizes) {
  std::vector<int> host_of;
  for (std::size_t h = 0; h < sizes.size(); ++h) {
    if (sizes[h] < 1)
      throw Error(fmt::format("host {} has {} ranks: every host needs at least one", h, sizes[h]));
    host_of.insert(host_of.end(), static_cast<std::size_t>(sizes[h]), static_cast<int>(h));
  }
  return Hosts(std::move(host_of));
}

Hosts hosts_of_members(const Hosts& hosts, const std::vector<int>& members) {
  std::vector<int> theirs;
  for (int m : members)
    theirs.push_back(hosts.host_of().at(static_cast<std::size_t>(m)));
  return numbered(theirs);
}

std::string describe(const Hosts& hosts) {
  const int h = hosts.hosts();
  std::vector<int> sizes;
  for (int i = 0; i < h; ++i)
    sizes.push_back(static_cast<int>(hosts.ranks_on(i).size()));
  const bool even = std::all_of(sizes.begin(), sizes.end(), [&](int s) { return s == sizes[0]; });
  const bool by_host = hosts.by_host();
  const std::string shape = even ? fmt::format("{} host{} x {} rank{}", h, h == 1 ? "" : "s",
                                               sizes.empty() ? 0 : sizes[0],
                                               !sizes.empty() && sizes[0] == 1 ? "" : "s")
                                 : fmt::format("{} hosts ({} ranks)", h, fmt::join(sizes, ", "));
  bool round_robin = !by_host;
  for (int r = 0; round_robin && r < hosts.ranks(); ++r)
    round_robin = hosts.host_of(r) == r % h;
  return fmt::format("{}, {}", shape,
                     by_host ? "by host" : round_robin ? "round robin" : "ranks interleaved");
}

void check_hosts(const Shape& shape) {
  if (shape.hosts && shape.hosts->ranks() != shape.world)
    throw Error(fmt::format("the hosts name {} ranks, but the group has {}",
                            shape.hosts->ranks(), shape.world));
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
