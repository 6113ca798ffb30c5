// Ring algorithms (Patarasuk & Yuan, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations", JPDC 2009; the ring
// reduce-scatter and all-gather of Thakur, Rabenseifner & Gropp,
// "Optimization of collective communication operations in MPICH", 2005).
//
// The buffer of `count` elements is cut into `world` chunks (chunk()). In
// reduce-scatter step s, rank r sends chunk (r - s) to rank r + 1 and
// reduces chunk (r - s - 1) received from rank r - 1; after world - 1 steps
// rank r holds the full reduction of chunk (r + 1). All-gather then passes
// the finished chunks around the ring in world - 1 more steps. Each rank
// sends 2 (n - 1) / n of the buffer in all: the bandwidth lower bound.
#pragma once

#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

// all_reduce in place on `count` elements.
Schedule ring_all_reduce(int rank, int world, std::size_t count);

}  // namespace collie::collectives
