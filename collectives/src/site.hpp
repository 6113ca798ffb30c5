// A rank's view of the hosts, for the two-level schedules (two_level.cpp,
// two_level_all_to_all.cpp): private to collectives/src.
#pragma once

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include <collie/collectives/hosts.hpp>
#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

// This rank's view of the hosts: its own host's ranks, its place among
// them, and each host's ranks.
struct Site {
  std::shared_ptr<const Hosts> hosts;
  int host = 0;     // this rank's
  int local = 0;    // its index on its host
  int stripes = 1;  // the most ranks on one host
  int count() const { return hosts->hosts(); }
  const std::vector<int>& on(int h) const { return hosts->ranks_on(h); }
  const std::vector<int>& here() const { return on(host); }
  // The rank of `host` that owns stripe s.
  int owner(int h, int s) const {
    const auto& ranks = on(h);
    return ranks[static_cast<std::size_t>(s) % ranks.size()];
  }
  // Whether local rank `i` of this host owns stripe s.
  bool owns(int i, int s) const { return s % static_cast<int>(here().size()) == i; }
  // Rank r's partner on host h: the rank there whose local index is r's
  // modulo the host's ranks (all_gather, reduce_scatter).
  int partner(int r_local, int h) const {
    const auto& ranks = on(h);
    return ranks[static_cast<std::size_t>(r_local) % ranks.size()];
  }
  // Whether every host has as many ranks: then a host's ranks are its
  // partners' partners, and the ranks of one local index form a ring
  // across the hosts.
  bool uniform() const {
    for (int h = 0; h < count(); ++h)
      if (on(h).size() != here().size()) return false;
    return true;
  }
  // The blocks local rank i of this host holds between the two levels: its
  // own, and those of the ranks of other hosts whose partner it is; in the
  // order the phase across hosts needs them (both sides of an exchange
  // within the host list them alike): by `turn`, the block's host's turn
  // (0 first), then by rank.
  template <typename Turn>
  std::vector<int> held_by(int i, Turn turn) const {
    std::vector<std::pair<int, int>> out;  // turn, rank
    const int me = here()[static_cast<std::size_t>(i)];
    for (int h = 0; h < count(); ++h) {
      const auto& ranks = on(h);
      for (std::size_t l = 0; l < ranks.size(); ++l) {
        if (h == host ? ranks[l] == me : partner(static_cast<int>(l), host) == me)
          out.emplace_back(turn(h), ranks[l]);
      }
    }
    std::sort(out.begin(), out.end());
    std::vector<int> blocks;
    for (const auto& [t, r] : out)
      blocks.push_back(r);
    return blocks;
  }
  // Host h's place counting back from this one: 0 for this host, 1 for the
  // one before it, ...
  int behind(int h) const { return wrap(host - h, count()); }
  // ... and forward: 1 for the host after this one, ..., 0 for this one.
  int ahead(int h) const { return wrap(h - host, count()); }
  // The host d after this one (d < 0: before it).
  int at(int d) const { return wrap(host + d, count()); }
};

inline Site site_of(const Shape& shape) {
  check_hosts(shape);
  Site site;
  site.hosts = shape.hosts;
  if (!site.hosts)
    site.hosts = std::make_shared<const Hosts>(Hosts::one_per_rank(shape.world));
  site.host = site.hosts->host_of(shape.rank);
  site.local = site.hosts->local_index(shape.rank);
  site.stripes = std::max(1, site.hosts->most_per_host());
  return site;
}

}  // namespace collie::collectives
