// Two-level schedules: within each host, then across hosts, then within
// each host again, so that each host's link carries what the cluster's
// bound asks of it and no more (the hierarchical all-reduce of NCCL's trees
// and of Horovod; Thakur et al. 2005 section 5 on SMP clusters).
//
// - two_level_all_reduce: the buffer is cut into S stripes, S the most
//   ranks on one host; on a host of L ranks, stripe s belongs to its local
//   rank s % L. (1) Within each host, a pairwise reduce-scatter: in step k
//   local rank i sends the stripes of local rank i + k to it and reduces
//   into its own those of local rank i - k (L - 1 steps). (2) Across hosts,
//   for each stripe, the ranks that own it (one per host) run a ring
//   all_reduce on it, every stripe's ring at once: each host sends
//   2 (H - 1) / H of the buffer over its link, spread over all its ranks.
//   (3) Within each host, a pairwise all-gather of the stripes. A stripe
//   of several segments moves within the host in the order its ring
//   needs (1) and finishes (3) its pieces: the link starts once the first
//   segment is reduced, not the stripe (on the emulated 4 x 2 cluster, 16
//   MiB took 217.9-218.6 ms against 218.6-223.2 in stripe order). Hosts of
//   different sizes work (a rank of a smaller host owns several stripes);
//   with one host it is a reduce-scatter and an all-gather over shared
//   memory, with one rank per host a ring.
// - two_level_all_gather: each rank's block goes once to each other host,
//   to one rank there (its partner: the rank of that host whose local index
//   is the sender's modulo the host's ranks), in H - 1 steps (step k: to
//   the partner on host h + k, from the ranks of host h - k whose partner
//   this rank is); then, within each host, a pairwise exchange of what each
//   rank holds (its own block and those it received), L - 1 steps. Each
//   host's link carries its ranks' blocks once to each other host: with
//   hosts of one size, (H - 1) / H of the output, the bound.
// - two_level_reduce_scatter: its mirror. Within each host, a pairwise
//   exchange sums, into each rank, its host's part of the blocks it will
//   send: its own block and those of the ranks on other hosts whose partner
//   here it is; then, in H - 1 steps, each such partial sum goes to its
//   rank, which adds it to its block. Each host's link carries one partial
//   sum per rank of the other hosts.
// - two_level_broadcast: a pipelined chain of chains. The root's host
//   passes each piece to the next host's leader (the rank whose local index
//   is the root's, modulo that host's ranks), which passes it on to the
//   next host's and, at the same time, along a chain of its own host's
//   ranks: H + L - 2 hops from the root to the last rank instead of the
//   flat chain's n - 1, and the whole buffer once over each host's link.
// - two_level_reduce: its mirror, the broadcast's steps backwards: each
//   host's ranks sum along their chain into its leader, which adds the
//   next host's sum and passes the result toward the root.
// - two_level_all_to_all: fewer, larger messages between hosts. Rank d's
//   blocks from host g are gathered on one rank of g (the one whose local
//   index is d's, modulo g's ranks): within each host, pairwise, each rank
//   hands its blocks for the ranks of other hosts to the ranks that gather
//   for them (and its blocks for its own host's ranks straight to them);
//   then each gatherer sends each of its ranks one message of its host's
//   blocks. Between two hosts of L ranks, L messages of L blocks instead of
//   L^2 of one; the same bytes, and (L - 1) / L of them once more within the
//   host. A receiver whose senders' ranks are not consecutive (round robin)
//   takes the message into scratch memory past its output and puts each
//   block in place.
#pragma once

#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

Schedule two_level_all_reduce(const Shape& shape);
Schedule two_level_all_gather(const Shape& shape);
Schedule two_level_reduce_scatter(const Shape& shape);
Schedule two_level_broadcast(const Shape& shape);
Schedule two_level_reduce(const Shape& shape);
Schedule two_level_all_to_all(const Shape& shape);

}  // namespace collie::collectives
