// Binomial-tree schedules: broadcast, reduce, gather, scatter and the
// tree all_reduce (tree.hpp).
#include <collie/collectives/tree.hpp>

namespace collie::collectives {

namespace {

int lowbit(int v) {
  return v & -v;
}

// The smallest power of two >= n.
int ceil_pow2(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// The absolute rank of relative rank v.
int absolute(int v, const Shape& shape) {
  return wrap(v + shape.root, shape.world);
}

// Blocks of relative ranks [first, first + blocks), clipped to the world,
// as ranges of a buffer of n blocks of `count` in rank order (at most two:
// the relative order wraps around at rank n - 1).
std::vector<Range> subtree_blocks(int first, int blocks, const Shape& shape) {
  const int n = shape.world;
  const int last = std::min(first + blocks, n);  // exclusive, relative
  std::vector<Range> out;
  if (first >= last) return out;
  const int a = absolute(first, shape);
  const int len = last - first;
  const int tail = std::min(len, n - a);  // blocks before wrapping past n - 1
  const auto c = shape.count;
  out.push_back(Range{static_cast<std::size_t>(a) * c, static_cast<std::size_t>(tail) * c});
  if (len > tail) out.push_back(Range{0, static_cast<std::size_t>(len - tail) * c});
  return out;
}

Range whole(const Shape& shape) {
  return Range{0, shape.count};
}

// Appends the binomial broadcast of `range` among the ranks to `s`.
void broadcast_steps(Schedule& s, const Shape& shape, Range range) {
  const int v = wrap(shape.rank - shape.root, shape.world);
  int mask = v == 0 ? ceil_pow2(shape.world) : lowbit(v);
  if (v != 0) {
    Step st;
    add_recv(st, absolute(v - lowbit(v), shape), range, Combine::Copy);
    push_step(s, std::move(st));
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask >= shape.world) continue;
    Step st;
    add_send(st, absolute(v + mask, shape), range);
    push_step(s, std::move(st));
  }
}

void reduce_steps(Schedule& s, const Shape& shape, Range range) {
  const int v = wrap(shape.rank - shape.root, shape.world);
  for (int mask = 1; mask < shape.world; mask <<= 1) {
    Step st;
    if (v & mask) {
      add_send(st, absolute(v - mask, shape), range);
      push_step(s, std::move(st));
      return;
    }
    if (v + mask < shape.world) add_recv(st, absolute(v + mask, shape), range, Combine::Reduce);
    push_step(s, std::move(st));
  }
}

}  // namespace

Schedule tree_broadcast(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  broadcast_steps(s, shape, whole(shape));
  return s;
}

Schedule tree_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  reduce_steps(s, shape, whole(shape));
  return s;
}

Schedule tree_all_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  Shape at_zero = shape;
  at_zero.root = 0;
  reduce_steps(s, at_zero, whole(shape));
  broadcast_steps(s, at_zero, whole(shape));
  return s;
}

Schedule tree_gather(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const int v = wrap(shape.rank - shape.root, shape.world);
  Step first;
  add_copy(first, Range{shape.count * n, shape.count},
           Range{static_cast<std::size_t>(shape.rank) * shape.count, shape.count});
  push_step(s, std::move(first));
  for (int mask = 1; mask < shape.world; mask <<= 1) {
    Step st;
    if (v & mask) {  // pass my subtree, [v, v + mask), to my parent
      for (const auto& r : subtree_blocks(v, mask, shape))
        add_send(st, absolute(v - mask, shape), r);
      push_step(s, std::move(st));
      break;
    }
    for (const auto& r : subtree_blocks(v + mask, mask, shape))
      add_recv(st, absolute(v + mask, shape), r, Combine::Copy);
    push_step(s, std::move(st));
  }
  return s;
}

Schedule tree_scatter(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const int v = wrap(shape.rank - shape.root, shape.world);
  int mask = v == 0 ? ceil_pow2(shape.world) : lowbit(v);
  if (v != 0) {  // my subtree's blocks from my parent
    Step st;
    for (const auto& r : subtree_blocks(v, mask, shape))
      add_recv(st, absolute(v - mask, shape), r, Combine::Copy);
    push_step(s, std::move(st));
  }
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask >= shape.world) continue;
    Step st;
    for (const auto& r : subtree_blocks(v + mask, mask, shape))
      add_send(st, absolute(v + mask, shape), r);
    push_step(s, std::move(st));
  }
  Step last;  // my block into the output
  add_copy(last, Range{static_cast<std::size_t>(shape.rank) * shape.count, shape.count},
           Range{shape.count * n, shape.count});
  push_step(s, std::move(last));
  return s;
}

Schedule linear_gather(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const Range input{shape.count * n, shape.count};
  Step st;
  if (shape.rank == shape.root) {
    add_copy(st, input, Range{static_cast<std::size_t>(shape.rank) * shape.count, shape.count});
    for (int r = 0; r < shape.world; ++r)
      if (r != shape.root)
        add_recv(st, r, Range{static_cast<std::size_t>(r) * shape.count, shape.count},
                 Combine::Copy);
  } else {
    add_send(st, shape.root, input);
  }
  push_step(s, std::move(st));
  return s;
}

Schedule linear_scatter(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const Range output{shape.count * n, shape.count};
  Step st;
  if (shape.rank == shape.root) {
    add_copy(st, Range{static_cast<std::size_t>(shape.rank) * shape.count, shape.count}, output);
    for (int r = 0; r < shape.world; ++r)
      if (r != shape.root)
        add_send(st, r, Range{static_cast<std::size_t>(r) * shape.count, shape.count});
  } else {
    add_recv(st, shape.root, output, Combine::Copy);
  }
  push_step(s, std::move(st));
  return s;
}

}  // namespace collie::collectives
