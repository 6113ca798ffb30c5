// Binomial-tree algorithms: ceil(log2 n) rounds, the latency-optimal shape
// for small buffers (Thakur, Rabenseifner & Gropp, "Optimization of
// collective communication operations in MPICH", IJHPCA 19(1), 2005,
// sections 3 and 4: MPICH's short-message broadcast, reduce, gather and
// scatter).
//
// Ranks are numbered relative to the root (v = (r - root) mod n). The
// parent of v is v with its lowest set bit cleared; v's subtree is
// [v, v + lowbit(v)) (the root's: everything), so every subtree's blocks
// are contiguous in relative order (and at most two ranges in rank order).
// - tree_broadcast: receive from the parent, then send to the children,
//   largest subtree first.
// - tree_reduce: receive and reduce each child's partial result, smallest
//   subtree first, then send to the parent. Every rank but the root ends with
//   a partial result in its buffer (the runtime gives it a scratch copy).
// - tree_all_reduce: tree_reduce to rank 0, then tree_broadcast from it:
//   2 ceil(log2 n) rounds of the whole buffer, every rank bit-identical.
// - tree_gather / tree_scatter: subtrees' blocks flow up to the root, or
//   down from it, one message per round. Ranks pass on their subtree's
//   blocks, so they need room for them (the working buffer spans all n
//   blocks; the runtime allocates only the part a rank touches).
#pragma once

#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

Schedule tree_broadcast(const Shape& shape);
Schedule tree_reduce(const Shape& shape);
Schedule tree_all_reduce(const Shape& shape);
Schedule tree_gather(const Shape& shape);
Schedule tree_scatter(const Shape& shape);

// Linear gather and scatter: the root exchanges one block with every other
// rank, all at once (one round; the root's link carries n - 1 blocks). Best
// for few ranks or large blocks, where the tree's forwarding costs more than
// it saves.
Schedule linear_gather(const Shape& shape);
Schedule linear_scatter(const Shape& shape);

}  // namespace collie::collectives
