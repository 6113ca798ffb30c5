// The link between hosts, measured when the world is made (init.cpp), for
// Auto's cost model (CostModel::host_alpha, host_beta) in every group that
// spans hosts.
//
// Where the world spans several hosts and COLLIE_HOST_LINK is not set, the
// first rank of host 0 (the prober) and the first rank of host 1 (its
// echo) time a short exchange over the transport the collectives use:
//   - latency: 9 round trips of 8 bytes; the median's half;
//   - rate: 64 KiB, then 4 times more each time (up to 16 MiB) until one
//     takes at least 8 ms and the one before it 2, each acknowledged by the
//     echo; the rate is the last two sizes' difference over their times'
//     difference, so the round trip, the connection's start and a shaper's
//     burst (tbf lets its bucket's 256 KB by at once) cancel out. Where
//     the round trip took over 100 us (a busy machine), the last two are
//     timed once more, each the faster of its two times.
// On 1 Gbit/s that is about 45 ms (64 KiB to 4 MiB), on 10 Gbit/s about
// 20 (to 16 MiB); one host, or a set COLLIE_HOST_LINK, skips it. The prober
// writes the result to the store (keys::kHostLink); every rank reads it
// there, so every rank's Auto prices alike. Under COLLIE_STREAMS=auto the
// prober then times 4 connections together (the transport's lanes,
// transport/src/tcp/lanes.hpp) over the same two sizes, and 8 where 4
// paid, and keeps the count whose rate beats the fewer's by 1.2 times (a
// network that caps each flow: 4 flows of 0.5 Gbit/s fill a 2 Gbit/s link
// one flow could not); every rank then opens that many lanes per pair
// (set_streams), and the link's rate is theirs together. That adds about
// 70 ms on 1 Gbit/s where one flow fills the link.
#pragma once

#include <string>

#include "group/host_link.hpp"

namespace collie {

struct World;

// The link as the world's ranks agree on it: COLLIE_HOST_LINK where set,
// measured where the world spans hosts, else the variable's default (one
// host: never used). A collective call of the world's ranks during init,
// after the transport is open and the placement known; throws what the
// transport and the store throw, with the context.
HostLink agree_on_host_link(World& world);

// "0.958 Gbit/s, 6 us (measured between rank 0 and rank 2 in 44 ms)", for `collie
// bench` and logs.
std::string describe(const HostLink& link);

}  // namespace collie
