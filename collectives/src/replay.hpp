// The executor's data path replayed on the real schedules, for the cost
// model (cost.cpp): private to collectives/src.
#pragma once

#include <cstddef>
#include <vector>

#include <collie/collectives/cost.hpp>

namespace collie::collectives {

// The executor's data path replayed piece by piece (runtime/src/executor/
// flow_run.cpp): every send and receive is cut into pieces of flow_bytes,
// and an op waits only for the earlier ops that touch its elements (a read
// for the last write; a write for the last write and the reads since), for
// the op before it to or from the same peer, and a receive for the send it
// matches. Ops run as soon as they may, each rank's outgoing and incoming
// link carrying one at a time: so a tree's steps overlap, as they do when
// it runs. Then, from each rank's order, the bytes it touches that miss
// the cache: a byte last touched more than its share of the cache ago
// (cache_bytes / ranks) comes from memory, and so does its first touch
// when the rank's buffer is larger than the share. The schedules have
// passed run_schedules() (they run step by step), and every dependency
// points to an op posted earlier or to a send a receive matches, so the
// replay cannot stall; if it does, that is this replay's bug, and it says
// where rather than price the collective on a clock it did not finish.
struct Flow {
  double seconds = 0;        // when the last rank finishes
  std::vector<double> cold;  // [rank] bytes from memory
  std::vector<double> warm;  // [rank] bytes from the shared cache
};
Flow replay(Collective c, Algorithm a, const std::vector<Schedule>& schedules,
            std::size_t element_bytes, const CostModel& model);

}  // namespace collie::collectives
