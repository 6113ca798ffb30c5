// Ring and pipelined-chain schedules (ring.hpp).
#include <collie/collectives/ring.hpp>

namespace collie::collectives {

namespace {

// The block of a reduce-scatter or all-gather: rank-sized blocks of `count`.
Range block(std::size_t count, int i) {
  return Range{static_cast<std::size_t>(i) * count, count};
}

// n - 1 reduce-scatter steps in which rank r ends with the reduction of
// part `r + shift`, where part(i) gives the range of part i.
template <class Part>
void reduce_scatter_steps(Schedule& s, int rank, int world, int shift, Part part) {
  const int next = wrap(rank + 1, world);
  const int prev = wrap(rank - 1, world);
  for (int step = 0; step < world - 1; ++step) {
    Step st;
    add_send(st, next, part(wrap(rank + shift - 1 - step, world)));
    add_recv(st, prev, part(wrap(rank + shift - 2 - step, world)), Combine::Reduce);
    push_step(s, std::move(st));
  }
}

// n - 1 all-gather steps, starting with rank r owning part `r + shift`.
template <class Part>
void all_gather_steps(Schedule& s, int rank, int world, int shift, Part part) {
  const int next = wrap(rank + 1, world);
  const int prev = wrap(rank - 1, world);
  for (int step = 0; step < world - 1; ++step) {
    Step st;
    add_send(st, next, part(wrap(rank + shift - step, world)));
    add_recv(st, prev, part(wrap(rank + shift - 1 - step, world)), Combine::Copy);
    push_step(s, std::move(st));
  }
}

}  // namespace

Schedule ring_all_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  auto part = [&](int i) { return chunk(shape.count, shape.world, i); };
  reduce_scatter_steps(s, shape.rank, shape.world, 1, part);
  all_gather_steps(s, shape.rank, shape.world, 1, part);
  return s;
}

Schedule ring_reduce_scatter(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count * static_cast<std::size_t>(shape.world);
  reduce_scatter_steps(s, shape.rank, shape.world, 0,
                       [&](int i) { return block(shape.count, i); });
  return s;
}

Schedule ring_all_gather(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  Step first;  // the rank's input into its own block
  add_copy(first, Range{shape.count * n, shape.count}, block(shape.count, shape.rank));
  push_step(s, std::move(first));
  all_gather_steps(s, shape.rank, shape.world, 0, [&](int i) { return block(shape.count, i); });
  return s;
}

Schedule chain_broadcast(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const int n = shape.world;
  const int pieces = std::max(shape.pieces, 1);
  const int pos = wrap(shape.rank - shape.root, n);  // place in the chain; the root is 0
  const int prev = wrap(shape.rank - 1, n);
  const int next = wrap(shape.rank + 1, n);
  // Piece k leaves the root in step k and is received by position p in step
  // k + p - 1, which forwards it in step k + p.
  for (int t = 0; t < pieces + n - 2; ++t) {
    Step st;
    const int in = t - pos + 1;
    const int out = t - pos;
    if (pos > 0 && in >= 0 && in < pieces)
      add_recv(st, prev, chunk(shape.count, pieces, in), Combine::Copy);
    if (pos + 1 < n && out >= 0 && out < pieces) add_send(st, next, chunk(shape.count, pieces, out));
    push_step(s, std::move(st));
  }
  return s;
}

Schedule chain_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const int n = shape.world;
  const int pieces = std::max(shape.pieces, 1);
  // The chain runs root + n - 1, root + n - 2, ..., root + 1, root; `d` is
  // the distance from its start. Position d reduces piece k (from d - 1) in
  // step k + d - 1 and passes the partial result on in step k + d.
  const int pos = wrap(shape.rank - shape.root, n);
  const int d = n - 1 - pos;
  const int from = wrap(shape.rank + 1, n);
  const int to = wrap(shape.rank - 1, n);
  for (int t = 0; t < pieces + n - 2; ++t) {
    Step st;
    const int in = t - d + 1;
    const int out = t - d;
    if (d > 0 && in >= 0 && in < pieces)
      add_recv(st, from, chunk(shape.count, pieces, in), Combine::Reduce);
    if (pos > 0 && out >= 0 && out < pieces) add_send(st, to, chunk(shape.count, pieces, out));
    push_step(s, std::move(st));
  }
  return s;
}

}  // namespace collie::collectives
