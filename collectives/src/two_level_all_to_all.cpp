// two_level all_to_all (two_level.hpp): each host's blocks for a rank of
// another host gathered into one message.
#include <map>
#include <vector>

#include <collie/collectives/two_level.hpp>

#include "site.hpp"

namespace collie::collectives {

namespace {

// Which rank of host g gathers its host's blocks for rank d (of another
// host): the one whose local index is d's modulo g's ranks.
int gatherer(const Site& site, int g, int d) {
  return site.partner(site.hosts->local_index(d), g);
}

// The ranks of other hosts whose blocks rank x (of this rank's host)
// gathers, in the order both sides list them: by host, from the next one,
// then by local index.
std::vector<int> gathered_by(const Site& site, int x) {
  std::vector<int> out;
  for (int t = 1; t < site.count(); ++t)
    for (int d : site.on(site.at(t)))
      if (gatherer(site, site.host, d) == x) out.push_back(d);
  return out;
}

// Whether host g's ranks are consecutive numbers (by host): their blocks
// then lie side by side in a receiver's output.
bool consecutive(const Site& site, int g) {
  const auto& ranks = site.on(g);
  for (std::size_t i = 1; i < ranks.size(); ++i)
    if (ranks[i] != ranks[0] + static_cast<int>(i)) return false;
  return true;
}

}  // namespace

Schedule two_level_all_to_all(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  const std::size_t k = shape.count;
  const auto site = site_of(shape);
  const auto& here = site.here();
  const auto l = static_cast<std::size_t>(site.local);
  const std::size_t local_ranks = here.size();
  const auto input = [&](int r) { return block(k, r); };
  const auto output = [&](int r) { return Range{(n + static_cast<std::size_t>(r)) * k, k}; };
  // Past the input and the output: for each rank this one gathers for, its
  // host's blocks in local order; then, for each other host whose ranks
  // are not consecutive, what comes from there, before it is put in place.
  std::size_t end = 2 * n * k;
  const auto mine = gathered_by(site, shape.rank);
  std::map<int, std::size_t> gathered_at;  // rank -> its host's blocks
  for (int d : mine) {
    gathered_at[d] = end;
    end += local_ranks * k;
  }
  std::map<int, std::size_t> arriving_at;  // host -> its blocks, in its local order
  for (int t = 1; t < site.count(); ++t) {
    const int g = site.at(-t);
    if (!consecutive(site, g)) {
      arriving_at[g] = end;
      end += site.on(g).size() * k;
    }
  }
  s.buffer_count = end;
  const auto slot = [&](int d, std::size_t source_local) {
    return Range{gathered_at.at(d) + source_local * k, k};
  };

  // Its own block in place, and its blocks for the ranks it gathers for.
  Step own;
  add_copy(own, input(shape.rank), output(shape.rank));
  for (int d : mine) add_copy(own, input(d), slot(d, l));
  push_step(s, std::move(own));
  // (1) Within the host, pairwise: to the rank i ahead, its block for that
  // rank and those for the ranks it gathers for; from the rank i behind,
  // the same for this one.
  for (std::size_t i = 1; i < local_ranks; ++i) {
    Step st;
    const int to = here[(l + i) % local_ranks];
    const auto from_local = (l + local_ranks - i) % local_ranks;
    const int from = here[from_local];
    add_send(st, to, input(to));
    for (int d : gathered_by(site, to)) add_send(st, to, input(d));
    add_recv(st, from, output(from), Combine::Copy);
    for (int d : mine) add_recv(st, from, slot(d, from_local), Combine::Copy);
    push_step(s, std::move(st));
  }
  // (2) Across hosts, host t ahead and t behind in step t: to each rank
  // there this one gathers for, its host's blocks in one message; from the
  // rank there that gathers for this one, that host's blocks.
  Step place;  // (3) what came to scratch, into the output
  for (int t = 1; t < site.count(); ++t) {
    Step st;
    const int ahead = site.at(t);
    for (int d : mine)
      if (site.hosts->host_of(d) == ahead)
        add_send(st, d, Range{gathered_at.at(d), local_ranks * k});
    const int behind = site.at(-t);
    const auto& sources = site.on(behind);
    const int sender = gatherer(site, behind, shape.rank);
    if (consecutive(site, behind)) {
      add_recv(st, sender, Range{output(sources.front()).offset, sources.size() * k},
               Combine::Copy);
    } else {
      const std::size_t at = arriving_at.at(behind);
      add_recv(st, sender, Range{at, sources.size() * k}, Combine::Copy);
      for (std::size_t j = 0; j < sources.size(); ++j)
        add_copy(place, Range{at + j * k, k}, output(sources[j]));
    }
    push_step(s, std::move(st));
  }
  push_step(s, std::move(place));
  return s;
}

}  // namespace collie::collectives
