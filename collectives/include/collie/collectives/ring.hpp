// Ring and chain algorithms: bandwidth-optimal, n - 1 (or 2 (n - 1)) steps,
// each rank talking only to its two neighbours.
//
// - ring_all_reduce: reduce-scatter then all-gather around the ring
//   (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters
//   of workstations", JPDC 69(2), 2009; the ring reduce-scatter and
//   all-gather of Thakur, Rabenseifner & Gropp, "Optimization of collective
//   communication operations in MPICH", IJHPCA 19(1), 2005). The buffer is
//   cut into n chunks (chunk()); in reduce-scatter step s rank r sends chunk
//   r - s to r + 1 and reduces chunk r - s - 1 from r - 1, so after n - 1
//   steps it holds the full reduction of chunk r + 1; the all-gather passes
//   finished chunks around in n - 1 more steps. Each rank sends 2 (n - 1) / n
//   of the buffer: the lower bound.
// - ring_reduce_scatter / ring_all_gather: one of those two halves, on
//   blocks of `count` elements (rank r ends owning block r).
// - chain_broadcast / chain_reduce: a pipelined chain through the ranks in
//   rank order from the root (broadcast) or towards it (reduce), the buffer
//   cut into `pieces` so that all links carry data at once (the "pipelined
//   chain" of MPICH's long-message broadcast and of NCCL's ring broadcast;
//   Thakur et al. 2005, section 4). Time ~ (n - 2 + pieces) steps of one
//   piece each: for large buffers the whole chain costs about one buffer's
//   transfer time, whatever n is.
// Layouts (which elements of a rank's working buffer mean what) are in
// algorithms.hpp.
#pragma once

#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

Schedule ring_all_reduce(const Shape& shape);
Schedule ring_reduce_scatter(const Shape& shape);
Schedule ring_all_gather(const Shape& shape);
Schedule chain_broadcast(const Shape& shape);
Schedule chain_reduce(const Shape& shape);

}  // namespace collie::collectives
