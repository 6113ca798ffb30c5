// Pairwise exchange and dissemination.
//
// - pairwise_all_to_all: in step k = 1..n-1 rank r sends its block for rank
//   r + k and receives rank r - k's block for it, so every link is used by
//   exactly one message per step and no rank is a hot spot (MPICH's
//   long-message all-to-all: Thakur, Rabenseifner & Gropp, "Optimization of
//   collective communication operations in MPICH", IJHPCA 19(1), 2005,
//   section 5). Its own block is a local copy. Layout: [input: n blocks |
//   output: n blocks].
// - dissemination_barrier: in round k rank r signals r + 2^k and waits for
//   r - 2^k; after ceil(log2 n) rounds every rank has heard, directly or
//   not, from every other (Hensgen, Finkel & Manber, "Two algorithms for
//   barrier synchronization", IJPP 17(1), 1988). The schedule carries one
//   token element, reduced, so that symbolic execution shows who has been
//   heard from.
#pragma once

#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

Schedule pairwise_all_to_all(const Shape& shape);
Schedule dissemination_barrier(const Shape& shape);

}  // namespace collie::collectives
