// Two-level schedules (two_level.hpp).
#include <collie/collectives/two_level.hpp>

#include <algorithm>
#include <array>
#include <memory>

#include <collie/collectives/hosts.hpp>

#include "site.hpp"

namespace collie::collectives {

Schedule two_level_all_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const auto site = site_of(shape);
  const int local_ranks = static_cast<int>(site.here().size());
  const int stripes = site.stripes;
  auto stripe = [&](int i) { return chunk(shape.count, stripes, i); };
  const int hosts = site.count();
  const int next = site.at(1);
  const int prev = site.at(-1);
  auto piece = [&](int i, int j) {  // piece j of stripe i
    const Range r = stripe(i);
    const Range p = chunk(r.count, hosts, wrap(j, hosts));
    return Range{r.offset + p.offset, p.count};
  };
  // The executor sends a peer's transfers in schedule order, each a
  // segment at a time from its first element up, and the ring (2) takes a
  // stripe's pieces in ascending order, each host starting from its own.
  // So where a stripe spans several segments, the steps within the host
  // move it in two parts, from piece `first` to the end, then the start:
  // (1) first the piece the ring sends first, (3) first the piece it
  // finishes first. The link starts at once, and only the piece finished
  // last follows the ring's end.
  const bool in_ring_order = shape.pieces > stripes;
  auto stripe_from = [&](int i, int first) {
    const Range r = stripe(i);
    const std::size_t cut = in_ring_order ? piece(i, first).offset : r.offset;
    return std::array{Range{cut, r.offset + r.count - cut}, Range{r.offset, cut - r.offset}};
  };
  // Within the host, pairwise in L - 1 steps: reducing (1), each stripe
  // into its owner, from the piece the ring sends first; copying (3), each
  // stripe from its owner to the others, from the piece it finishes first.
  auto within_host = [&](bool reducing) {
    const int first = reducing ? site.host : site.host - 1;
    for (int k = 1; k < local_ranks; ++k) {
      Step st;
      const int to = (site.local + k) % local_ranks;
      const int from = (site.local - k + local_ranks) % local_ranks;
      for (int i = 0; i < stripes; ++i) {
        // Reducing, a rank sends `to` its stripes and receives its own;
        // copying, it sends its own and receives those of `from`.
        const bool send = site.owns(reducing ? to : site.local, i);
        const bool recv = site.owns(reducing ? site.local : from, i);
        for (const Range& part : stripe_from(i, first)) {
          if (send) add_send(st, site.here()[static_cast<std::size_t>(to)], part);
          if (recv)
            add_recv(st, site.here()[static_cast<std::size_t>(from)], part,
                     reducing ? Combine::Reduce : Combine::Copy);
        }
      }
      push_step(s, std::move(st));
    }
  };
  // (1) Within the host: each stripe reduced into its owner.
  within_host(true);
  // (2) Across hosts: a ring all_reduce of each stripe among its owners, in
  // host order, each host sending to the one before it; the rings of this
  // rank's stripes step together.
  for (int step = 0; step < 2 * (hosts - 1); ++step) {
    Step st;
    const bool reducing = step < hosts - 1;
    const int t = reducing ? step : step - (hosts - 1);
    // Reduce-scatter: step t sends piece host + t and reduces piece
    // host + t + 1 into this host's, which ends with piece host - 1 whole;
    // all-gather: step t sends piece host - 1 + t and receives host + t.
    const int out = reducing ? site.host + t : site.host - 1 + t;
    for (int i = 0; i < stripes; ++i) {
      if (!site.owns(site.local, i)) continue;
      add_send(st, site.owner(prev, i), piece(i, out));
      add_recv(st, site.owner(next, i), piece(i, out + 1),
               reducing ? Combine::Reduce : Combine::Copy);
    }
    push_step(s, std::move(st));
  }
  // (3) Within the host: every stripe from its owner to the others.
  within_host(false);
  return s;
}

Schedule two_level_all_gather(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const auto site = site_of(shape);
  const int hosts = site.count();
  const int local_ranks = static_cast<int>(site.here().size());
  Step first;  // the rank's input into its own block
  add_copy(first, Range{shape.count * n, shape.count}, block(shape.count, shape.rank));
  push_step(s, std::move(first));
  // The order blocks arrive from other hosts, and leave within this one.
  const auto turn = [&](int h) { return site.behind(h); };
  if (site.uniform()) {
    // (1) Across hosts, a ring of the ranks of this local index: step t
    // passes the block of host - t's rank to the next host's, and takes
    // host - t - 1's from the one before (one flow out of each rank).
    const int next = site.at(1);
    const int prev = site.at(-1);
    for (int t = 0; t + 1 < hosts; ++t) {
      Step st;
      add_send(st, site.owner(next, site.local),
               block(shape.count, site.owner(site.at(-t), site.local)));
      const int from = site.owner(site.at(-t - 1), site.local);
      add_recv(st, site.owner(prev, site.local), block(shape.count, from), Combine::Copy);
      push_step(s, std::move(st));
    }
  } else {
    // (1) Across hosts: this rank's block to its partner on host + k; the
    // blocks of host - k's ranks whose partner this rank is.
    for (int k = 1; k < hosts; ++k) {
      Step st;
      add_send(st, site.partner(site.local, site.at(k)),
               block(shape.count, shape.rank));
      const int from = site.at(-k);
      const auto& there = site.on(from);
      for (std::size_t l = 0; l < there.size(); ++l)
        if (site.partner(static_cast<int>(l), site.host) == shape.rank)
          add_recv(st, there[l], block(shape.count, there[l]), Combine::Copy);
      push_step(s, std::move(st));
    }
  }
  // (2) Within the host: what each rank holds, to every other, each block
  // as it arrives.
  const auto mine = site.held_by(site.local, turn);
  for (int k = 1; k < local_ranks; ++k) {
    Step st;
    const int to = (site.local + k) % local_ranks;
    const int from = (site.local - k + local_ranks) % local_ranks;
    for (int b : mine)
      add_send(st, site.here()[static_cast<std::size_t>(to)], block(shape.count, b));
    for (int b : site.held_by(from, turn))
      add_recv(st, site.here()[static_cast<std::size_t>(from)], block(shape.count, b),
               Combine::Copy);
    push_step(s, std::move(st));
  }
  return s;
}

Schedule two_level_reduce_scatter(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count * static_cast<std::size_t>(shape.world);
  const auto site = site_of(shape);
  const int hosts = site.count();
  const int local_ranks = static_cast<int>(site.here().size());
  const bool ring = site.uniform();
  // The order the phase across hosts sends the partial sums in, so that
  // the first is summed first and the link starts while the host sums the
  // rest: the ring's, host - 1's first (its own last); the direct
  // exchange's, host + 1's first.
  const auto turn = [&](int h) {
    return wrap((ring ? site.behind(h) : site.ahead(h)) - 1, hosts);
  };
  // (1) Within the host: into each rank, the host's sum of the blocks it
  // holds (its own, and those it is the partner of).
  const auto mine = site.held_by(site.local, turn);
  for (int k = 1; k < local_ranks; ++k) {
    Step st;
    const int to = (site.local + k) % local_ranks;
    const int from = (site.local - k + local_ranks) % local_ranks;
    for (int b : site.held_by(to, turn))
      add_send(st, site.here()[static_cast<std::size_t>(to)], block(shape.count, b));
    for (int b : mine)
      add_recv(st, site.here()[static_cast<std::size_t>(from)], block(shape.count, b),
               Combine::Reduce);
    push_step(s, std::move(st));
  }
  if (ring) {
    // (2) Across hosts, a ring of the ranks of this local index: step t
    // passes the partial sum of host - t - 1's rank's block to the next
    // host, and adds the one before's sum of host - t - 2's into its own;
    // after H - 1 steps this rank's block holds every host's.
    const int next = site.at(1);
    const int prev = site.at(-1);
    for (int t = 0; t + 1 < hosts; ++t) {
      Step st;
      const int out = site.owner(site.at(-t - 1), site.local);
      const int in = site.owner(site.at(-t - 2), site.local);
      add_send(st, site.owner(next, site.local), block(shape.count, out));
      add_recv(st, site.owner(prev, site.local), block(shape.count, in), Combine::Reduce);
      push_step(s, std::move(st));
    }
    return s;
  }
  // (2) Across hosts: each partial sum to its rank on host + k; from host -
  // k, this rank's partner's sum of its block.
  for (int k = 1; k < hosts; ++k) {
    Step st;
    const int to = site.at(k);
    const auto& there = site.on(to);
    for (std::size_t l = 0; l < there.size(); ++l)
      if (site.partner(static_cast<int>(l), site.host) == shape.rank)
        add_send(st, there[l], block(shape.count, there[l]));
    const int from = site.at(-k);
    add_recv(st, site.partner(site.local, from), block(shape.count, shape.rank),
             Combine::Reduce);
    push_step(s, std::move(st));
  }
  return s;
}

namespace {

// A rank's place in the two-level chain of broadcast and reduce: the hosts
// in order from the root's, each entered at its leader (the root on its
// own host; elsewhere the rank whose local index is the root's modulo the
// host's ranks, so that roots of different local indices use different
// ranks' links), and each host's ranks in a chain from its leader. In the
// broadcast, piece k reaches this rank in step k + offset and leaves it to
// its children in the step after.
struct Link {
  int parent = -1;            // none: the root
  std::vector<int> children;  // the next host's leader first, then the next rank here
  int offset = -1;            // the root's: it sends piece k in step k
};

Link chain_link(const Site& site, const Shape& shape) {
  const auto& hosts = *site.hosts;
  const int root_host = hosts.host_of(shape.root);
  const int root_local = hosts.local_index(shape.root);
  const int count = site.count();
  const auto leader = [&](int h) {
    return h == root_host ? shape.root : site.partner(root_local, h);
  };
  const int q = wrap(site.host - root_host, count);  // this host's place among the hosts
  const auto& here = site.here();
  const int l = static_cast<int>(here.size());
  const int first = hosts.local_index(leader(site.host));
  const int w = wrap(site.local - first, l);  // this rank's place on its host
  const auto local = [&](int i) { return here[static_cast<std::size_t>(wrap(first + i, l))]; };
  Link link;
  // Piece k reaches the leader of the host q places on in step k + q - 1
  // (the root has it from the start), then one rank further each step.
  link.offset = (q == 0 ? -1 : q - 1) + w;
  if (w > 0)
    link.parent = local(w - 1);
  else if (q > 0)
    link.parent = leader(site.at(-1));
  if (w == 0 && q + 1 < count) link.children.push_back(leader(site.at(1)));
  if (w + 1 < l) link.children.push_back(local(w + 1));
  return link;
}

// The largest offset of any rank: the last piece's last step, less pieces.
int last_offset(const Site& site, const Shape& shape) {
  const int root_host = site.hosts->host_of(shape.root);
  int most = -1;
  for (int h = 0; h < site.count(); ++h) {
    const int q = wrap(h - root_host, site.count());
    most = std::max(most, (q == 0 ? -1 : q - 1) + static_cast<int>(site.on(h).size()) - 1);
  }
  return most;
}

}  // namespace

Schedule two_level_broadcast(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const auto site = site_of(shape);
  const auto link = chain_link(site, shape);
  const int pieces = std::max(shape.pieces, 1);
  for (int t = 0; t <= pieces + link.offset; ++t) {
    Step st;
    const int in = t - link.offset;
    const int out = in - 1;
    if (link.parent >= 0 && in >= 0 && in < pieces)
      add_recv(st, link.parent, chunk(shape.count, pieces, in), Combine::Copy);
    if (out >= 0 && out < pieces)
      for (int c : link.children) add_send(st, c, chunk(shape.count, pieces, out));
    push_step(s, std::move(st));
  }
  return s;
}

Schedule two_level_reduce(const Shape& shape) {
  // The broadcast's steps backwards, on one clock for every rank: where it
  // received piece k from its parent, this rank sends it its partial sum;
  // where it sent it on, it adds its children's sums into its own.
  Schedule s;
  s.buffer_count = shape.count;
  const auto site = site_of(shape);
  const auto link = chain_link(site, shape);
  const int pieces = std::max(shape.pieces, 1);
  const int end = pieces + last_offset(site, shape);
  // A leader's two children's sums land on the same piece: one step each
  // (no two receives of a step overlap), its host's first.
  const std::vector<int> children(link.children.rbegin(), link.children.rend());
  for (int t = end; t >= 0; --t) {
    const int in = t - link.offset;
    const int out = in - 1;
    Step st;
    if (link.parent >= 0 && in >= 0 && in < pieces)
      add_send(st, link.parent, chunk(shape.count, pieces, in));
    if (out >= 0 && out < pieces) {
      for (int c : children) {
        add_recv(st, c, chunk(shape.count, pieces, out), Combine::Reduce);
        push_step(s, std::move(st));
        st = Step{};
      }
    }
    push_step(s, std::move(st));
  }
  return s;
}

}  // namespace collie::collectives
