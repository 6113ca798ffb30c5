// The alpha-beta cost model (Hockney; as used by Thakur, Rabenseifner &
// Gropp 2005 to choose MPICH's algorithms), applied to the schedules
// themselves rather than to a formula per algorithm: a step costs
//   alpha                                  (one round of latency)
// + beta  * max(bytes sent, bytes received) (the link, full duplex)
// + gamma * bytes reduced                   (the reduce kernel)
// and a rank's time is the sum over its steps. A collective's estimate is
// the slowest rank's time. For the ring this gives the textbook
// 2 (n - 1) alpha + 2 (n - 1) / n N beta + (n - 1) / n N gamma; for a
// pipelined chain (pieces + n - 2) (alpha + N / pieces beta); for a binomial
// tree ceil(log2 n) (alpha + N beta) at the root.
#pragma once

#include <collie/collectives/algorithms.hpp>

namespace collie::collectives {

struct CostModel {
  double alpha = 10e-6;      // seconds per step
  double beta = 1 / 3.0e9;   // seconds per byte on a link
  double gamma = 1 / 8.0e9;  // seconds per byte reduced
};

struct Cost {
  double seconds = 0;        // the model's time for the slowest rank
  std::size_t steps = 0;     // the most steps any rank takes
  std::size_t messages = 0;  // the most messages any rank sends
  std::size_t bytes = 0;     // the most bytes any rank sends
};

// One rank's schedule.
Cost estimate(const Schedule& schedule, std::size_t element_bytes, const CostModel& model);
// Every rank of the collective (max over ranks, each field on its own).
Cost estimate(Collective c, Algorithm a, const Shape& shape, std::size_t element_bytes,
              const CostModel& model);

}  // namespace collie::collectives
