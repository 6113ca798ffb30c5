// Recursive doubling and halving-doubling schedules (recursive.hpp).
#include <algorithm>
#include <functional>
#include <vector>

#include <collie/collectives/hosts.hpp>
#include <collie/collectives/recursive.hpp>

namespace collie::collectives {

namespace {

// The fold of a world that is not a power of two into p = 2^k virtual ranks.
struct Fold {
  int n = 1;
  int p = 1;    // the largest power of two <= n
  int rem = 0;  // n - p: the number of even ranks that sit out

  explicit Fold(int world) : n(world) {
    while (p * 2 <= n) p *= 2;
    rem = n - p;
  }
  // Sits out (hands its data to rank + 1)?
  bool extra(int rank) const { return rank < 2 * rem && rank % 2 == 0; }
  // The virtual rank of a rank that takes part.
  int virtual_rank(int rank) const { return rank < 2 * rem ? rank / 2 : rank - rem; }
  // The real rank that plays virtual rank v.
  int real(int v) const { return v < rem ? 2 * v + 1 : v + rem; }
  // The lowest real rank that virtual rank v stands for (p -> n).
  int first(int v) const { return v < rem ? 2 * v : v + rem; }
};

using Bounds = std::function<std::size_t(int)>;  // position -> its first element

Range span(const Bounds& bound, int from, int to) {
  return Range{bound(from), bound(to) - bound(from)};
}

// The order a halving takes the bits of a virtual rank, first first (the
// doubling takes them in reverse): the partner at distance masks[j] in
// step j. After j steps virtual rank v holds the p >> j positions whose
// first j bits, in that order, are v's: elements `held(bound, v, j)`.
struct BitOrder {
  int p = 1;
  std::vector<int> masks;
  Range held(const Bounds& bound, int v, std::size_t j) const {
    int prefix = 0;
    for (std::size_t i = 0; i < j; ++i) prefix = prefix * 2 + ((v & masks[i]) != 0 ? 1 : 0);
    const int count = p >> j;
    return span(bound, prefix * count, (prefix + 1) * count);
  }
};

// From the largest distance down: v ends with position v.
BitOrder descending(const Fold& f) {
  BitOrder o{f.p, {}};
  for (int mask = f.p / 2; mask >= 1; mask /= 2) o.masks.push_back(mask);
  return o;
}

// The bits whose partners share a host first, where the halving's
// exchanges are largest (then by distance, largest first): numbered by
// host, 8 ranks on 4 hosts halve within the host and send (H - 1) / H of
// the buffer over each host's link, as two_level does, where the largest
// distance first sends it all. Without hosts, or numbered round robin,
// this is `descending`.
BitOrder host_first(const Fold& f, const Shape& shape) {
  BitOrder o = descending(f);
  if (!shape.hosts) return o;
  // By mask: how many virtual ranks' partners share their host.
  std::vector<int> same_host(static_cast<std::size_t>(f.p), 0);
  for (int mask : o.masks)
    for (int v = 0; v < f.p; ++v)
      same_host[static_cast<std::size_t>(mask)] +=
          shape.hosts->host_of(f.real(v)) == shape.hosts->host_of(f.real(v ^ mask)) ? 1 : 0;
  std::stable_sort(o.masks.begin(), o.masks.end(), [&](int a, int b) {
    return same_host[static_cast<std::size_t>(a)] > same_host[static_cast<std::size_t>(b)];
  });
  return o;
}

// Recursive halving among the p virtual ranks: v ends with the reduction of
// the position its bits name in the order's order (v's own, descending).
void halving_steps(Schedule& s, const Fold& f, const BitOrder& o, int v, const Bounds& bound) {
  for (std::size_t j = 0; j < o.masks.size(); ++j) {
    const int other = v ^ o.masks[j];
    Step st;
    add_send(st, f.real(other), o.held(bound, other, j + 1));
    add_recv(st, f.real(other), o.held(bound, v, j + 1), Combine::Reduce);
    push_step(s, std::move(st));
  }
}

// Recursive doubling among the p virtual ranks, v starting with the
// positions the halving left it.
void doubling_steps(Schedule& s, const Fold& f, const BitOrder& o, int v, const Bounds& bound) {
  for (std::size_t j = o.masks.size(); j-- > 0;) {
    const int other = v ^ o.masks[j];
    Step st;
    add_send(st, f.real(other), o.held(bound, v, j + 1));
    add_recv(st, f.real(other), o.held(bound, other, j + 1), Combine::Copy);
    push_step(s, std::move(st));
  }
}

// Hands `range` from each sitting-out rank to its partner (reduce or copy),
// before the algorithm.
void fold_in(Schedule& s, const Fold& f, int rank, Range range, Combine combine) {
  if (rank >= 2 * f.rem) return;
  Step st;
  if (f.extra(rank))
    add_send(st, rank + 1, range);
  else
    add_recv(st, rank - 1, range, combine);
  push_step(s, std::move(st));
}

// Hands `range` back to each sitting-out rank, after the algorithm.
void fold_out(Schedule& s, const Fold& f, int rank, Range range) {
  if (rank >= 2 * f.rem) return;
  Step st;
  if (f.extra(rank))
    add_recv(st, rank + 1, range, Combine::Copy);
  else
    add_send(st, rank - 1, range);
  push_step(s, std::move(st));
}

}  // namespace

Schedule recursive_doubling_all_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const Fold f(shape.world);
  const Range all{0, shape.count};
  fold_in(s, f, shape.rank, all, Combine::Reduce);
  if (!f.extra(shape.rank)) {
    const int v = f.virtual_rank(shape.rank);
    for (int mask = 1; mask < f.p; mask *= 2) {
      Step st;
      add_send(st, f.real(v ^ mask), all);
      add_recv(st, f.real(v ^ mask), all, Combine::Reduce);
      push_step(s, std::move(st));
    }
  }
  fold_out(s, f, shape.rank, all);
  return s;
}

Schedule halving_doubling_all_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const Fold f(shape.world);
  const Range all{0, shape.count};
  // Virtual rank v owns the chunks of the real ranks it stands for.
  const Bounds bound = [&](int v) {
    const int r = v >= f.p ? shape.world : f.first(v);
    return r >= shape.world ? shape.count : chunk(shape.count, shape.world, r).offset;
  };
  fold_in(s, f, shape.rank, all, Combine::Reduce);
  if (!f.extra(shape.rank)) {
    const int v = f.virtual_rank(shape.rank);
    const BitOrder order = host_first(f, shape);
    halving_steps(s, f, order, v, bound);
    doubling_steps(s, f, order, v, bound);
  }
  fold_out(s, f, shape.rank, all);
  return s;
}

Schedule recursive_halving_reduce_scatter(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * n;
  const Fold f(shape.world);
  const Bounds bound = [&](int v) {
    const int r = v >= f.p ? shape.world : f.first(v);
    return static_cast<std::size_t>(r) * shape.count;
  };
  const Range mine{static_cast<std::size_t>(shape.rank) * shape.count, shape.count};
  fold_in(s, f, shape.rank, Range{0, s.buffer_count}, Combine::Reduce);
  if (!f.extra(shape.rank))
    halving_steps(s, f, descending(f), f.virtual_rank(shape.rank), bound);
  // The partner of a sitting-out rank reduced its block too: hand it over.
  if (shape.rank < 2 * f.rem) {
    Step st;
    if (f.extra(shape.rank))
      add_recv(st, shape.rank + 1, mine, Combine::Copy);
    else
      add_send(st, shape.rank - 1, Range{mine.offset - shape.count, shape.count});
    push_step(s, std::move(st));
  }
  return s;
}

Schedule recursive_doubling_all_gather(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const Fold f(shape.world);
  const Bounds bound = [&](int v) {
    const int r = v >= f.p ? shape.world : f.first(v);
    return static_cast<std::size_t>(r) * shape.count;
  };
  const Range mine{static_cast<std::size_t>(shape.rank) * shape.count, shape.count};
  Step first;
  add_copy(first, Range{shape.count * n, shape.count}, mine);
  push_step(s, std::move(first));
  fold_in(s, f, shape.rank, mine.offset >= shape.count && !f.extra(shape.rank)
                                ? Range{mine.offset - shape.count, shape.count}
                                : mine,
          Combine::Copy);
  if (!f.extra(shape.rank))
    doubling_steps(s, f, descending(f), f.virtual_rank(shape.rank), bound);
  fold_out(s, f, shape.rank, Range{0, shape.count * n});
  return s;
}

}  // namespace collie::collectives
