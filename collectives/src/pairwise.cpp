// all_to_all as a pairwise exchange, and the dissemination barrier, as
// schedules (pairwise.hpp).
#include <collie/collectives/pairwise.hpp>

namespace collie::collectives {

Schedule pairwise_all_to_all(const Shape& shape) {
  Schedule s;
  const auto n = static_cast<std::size_t>(shape.world);
  const auto c = shape.count;
  s.buffer_count = 2 * n * c;
  auto input = [&](int r) { return block(c, r); };
  auto output = [&](int r) { return Range{(n + static_cast<std::size_t>(r)) * c, c}; };
  Step own;
  add_copy(own, input(shape.rank), output(shape.rank));
  push_step(s, std::move(own));
  for (int k = 1; k < shape.world; ++k) {
    const int to = wrap(shape.rank + k, shape.world);
    const int from = wrap(shape.rank - k, shape.world);
    Step st;
    add_send(st, to, input(to));
    add_recv(st, from, output(from), Combine::Copy);
    push_step(s, std::move(st));
  }
  return s;
}

Schedule dissemination_barrier(const Shape& shape) {
  Schedule s;
  s.buffer_count = 1;
  for (int distance = 1; distance < shape.world; distance *= 2) {
    Step st;
    add_send(st, wrap(shape.rank + distance, shape.world), Range{0, 1});
    add_recv(st, wrap(shape.rank - distance, shape.world), Range{0, 1}, Combine::Reduce);
    push_step(s, std::move(st));
  }
  return s;
}

}  // namespace collie::collectives
