// Recursive doubling and halving: log2 n rounds between partners whose
// ranks differ in one bit (Thakur, Rabenseifner & Gropp, "Optimization of
// collective communication operations in MPICH", IJHPCA 19(1), 2005;
// Rabenseifner, "Optimization of collective reduction operations", ICCS
// 2004, for the halving-doubling all-reduce).
//
// Worlds that are not a power of two fold first (Thakur et al. section 4.4):
// with p the largest power of two <= n and rem = n - p, each even rank below
// 2 rem hands its data to the odd rank above it and sits out; the p ranks
// left, renumbered 0..p-1 ("virtual ranks"), run the power-of-two algorithm;
// then the odd ranks hand the result back. Virtual rank v stands for one or
// two consecutive real ranks, so the elements it is responsible for stay
// contiguous.
// - recursive_doubling_all_reduce: exchange and reduce the whole buffer with
//   the partner at distance 1, 2, 4...: log2 p rounds of the full buffer.
//   Latency-optimal, for small buffers. Each round sends from a snapshot
//   (the receive lands on the range being sent): a buffer-sized temporary.
// - halving_doubling_all_reduce (Rabenseifner): a recursive-halving
//   reduce-scatter (exchange half of what is left, keep reducing the half
//   you own) then a recursive-doubling all-gather: 2 log2 p rounds, each
//   rank sending about 2 (p - 1) / p of the buffer. Good at every size.
//   On several hosts the halving takes first the distances whose partners
//   share a host (its largest exchanges), so each host's link carries what
//   two_level's does where hosts hold a power of two of ranks each.
// - recursive_halving_reduce_scatter, recursive_doubling_all_gather: the two
//   halves alone, on blocks of `count` per rank.
#pragma once

#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

Schedule recursive_doubling_all_reduce(const Shape& shape);
Schedule halving_doubling_all_reduce(const Shape& shape);
Schedule recursive_halving_reduce_scatter(const Shape& shape);
Schedule recursive_doubling_all_gather(const Shape& shape);

}  // namespace collie::collectives
