#include <collie/collectives/ring.hpp>

namespace collie::collectives {

namespace {

int wrap(int i, int world) {
  return ((i % world) + world) % world;
}

}  // namespace

Schedule ring_all_reduce(int rank, int world, std::size_t count) {
  Schedule s;
  s.buffer_count = count;
  const int next = wrap(rank + 1, world);
  const int prev = wrap(rank - 1, world);
  auto add_step = [&](int send_chunk, int recv_chunk, Combine combine) {
    Step step;
    const Range out = chunk(count, world, send_chunk);
    const Range in = chunk(count, world, recv_chunk);
    if (out.count > 0) step.sends.push_back({next, out, Combine::Copy});
    if (in.count > 0) step.recvs.push_back({prev, in, combine});
    if (!step.sends.empty() || !step.recvs.empty()) s.steps.push_back(std::move(step));
  };
  for (int step = 0; step < world - 1; ++step)  // reduce-scatter
    add_step(wrap(rank - step, world), wrap(rank - step - 1, world), Combine::Reduce);
  for (int step = 0; step < world - 1; ++step)  // all-gather
    add_step(wrap(rank + 1 - step, world), wrap(rank - step, world), Combine::Copy);
  return s;
}

}  // namespace collie::collectives
