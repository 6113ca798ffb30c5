// Ring and pipelined-chain schedules (ring.hpp). Both follow ring_order():
// by host, so that a ring crosses each host's link once, however the ranks
// are numbered.
#include <collie/collectives/ring.hpp>

#include <collie/collectives/hosts.hpp>

namespace collie::collectives {

namespace {

// Where this rank is in the ring, and who its neighbours are: by host
// where the hosts are known (their order is worked out once, hosts.hpp).
struct Ring {
  const Hosts* hosts = nullptr;  // null: rank order
  int pos = 0;                   // this rank's position
  int n = 1;
  int at(int position) const {
    const int p = wrap(position, n);
    return hosts ? hosts->ring_order()[static_cast<std::size_t>(p)] : p;
  }
  int next() const { return at(pos + 1); }
  int prev() const { return at(pos - 1); }
  int position_of(int rank) const { return hosts ? hosts->position(rank) : rank; }
};

Ring ring_of(const Shape& shape) {
  check_hosts(shape);
  Ring r;
  r.hosts = shape.hosts.get();
  r.n = shape.world;
  r.pos = r.position_of(shape.rank);
  return r;
}

// n - 1 reduce-scatter steps in which the rank at position p ends with the
// reduction of part `p + shift`, where part(i) gives the range of part i.
template <class Part>
void reduce_scatter_steps(Schedule& s, const Ring& ring, int shift, Part part) {
  const int n = ring.n;
  for (int step = 0; step < n - 1; ++step) {
    Step st;
    add_send(st, ring.next(), part(wrap(ring.pos + shift - 1 - step, n)));
    add_recv(st, ring.prev(), part(wrap(ring.pos + shift - 2 - step, n)), Combine::Reduce);
    push_step(s, std::move(st));
  }
}

// n - 1 all-gather steps, starting with position p owning part `p + shift`.
template <class Part>
void all_gather_steps(Schedule& s, const Ring& ring, int shift, Part part) {
  const int n = ring.n;
  for (int step = 0; step < n - 1; ++step) {
    Step st;
    add_send(st, ring.next(), part(wrap(ring.pos + shift - step, n)));
    add_recv(st, ring.prev(), part(wrap(ring.pos + shift - 1 - step, n)), Combine::Copy);
    push_step(s, std::move(st));
  }
}

}  // namespace

Schedule ring_all_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const auto ring = ring_of(shape);
  auto part = [&](int i) { return chunk(shape.count, shape.world, i); };
  reduce_scatter_steps(s, ring, 1, part);
  all_gather_steps(s, ring, 1, part);
  return s;
}

Schedule ring_reduce_scatter(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count * static_cast<std::size_t>(shape.world);
  const auto ring = ring_of(shape);
  // Part i is the block of the rank at position i: each ends with its own.
  reduce_scatter_steps(s, ring, 0, [&](int i) { return block(shape.count, ring.at(i)); });
  return s;
}

Schedule ring_all_gather(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  s.buffer_count = shape.count * (n + 1);
  const auto ring = ring_of(shape);
  Step first;  // the rank's input into its own block
  add_copy(first, Range{shape.count * n, shape.count}, block(shape.count, shape.rank));
  push_step(s, std::move(first));
  all_gather_steps(s, ring, 0, [&](int i) { return block(shape.count, ring.at(i)); });
  return s;
}

Schedule chain_broadcast(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const int n = shape.world;
  const int pieces = std::max(shape.pieces, 1);
  const auto ring = ring_of(shape);
  const int root = ring.position_of(shape.root);
  const int pos = wrap(ring.pos - root, n);  // place in the chain; the root is 0
  // Piece k leaves the root in step k and is received by position p in step
  // k + p - 1, which forwards it in step k + p.
  for (int t = 0; t < pieces + n - 2; ++t) {
    Step st;
    const int in = t - pos + 1;
    const int out = t - pos;
    if (pos > 0 && in >= 0 && in < pieces)
      add_recv(st, ring.prev(), chunk(shape.count, pieces, in), Combine::Copy);
    if (pos + 1 < n && out >= 0 && out < pieces)
      add_send(st, ring.next(), chunk(shape.count, pieces, out));
    push_step(s, std::move(st));
  }
  return s;
}

Schedule chain_reduce(const Shape& shape) {
  Schedule s;
  s.buffer_count = shape.count;
  const int n = shape.world;
  const int pieces = std::max(shape.pieces, 1);
  const auto ring = ring_of(shape);
  const int root = ring.position_of(shape.root);
  // The chain runs root + n - 1, root + n - 2, ..., root + 1, root (in ring
  // positions); `d` is the distance from its start. Position d reduces
  // piece k (from d - 1) in step k + d - 1 and passes the partial result on
  // in step k + d.
  const int pos = wrap(ring.pos - root, n);
  const int d = n - 1 - pos;
  for (int t = 0; t < pieces + n - 2; ++t) {
    Step st;
    const int in = t - d + 1;
    const int out = t - d;
    if (d > 0 && in >= 0 && in < pieces)
      add_recv(st, ring.next(), chunk(shape.count, pieces, in), Combine::Reduce);
    if (pos > 0 && out >= 0 && out < pieces) add_send(st, ring.prev(), chunk(shape.count, pieces, out));
    push_step(s, std::move(st));
  }
  return s;
}

}  // namespace collie::collectives
