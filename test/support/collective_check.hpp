// Runs one collective on a process group with inputs every rank computes
// from (rank, index), and compares every element of the result with a
// reference computed here, independently of collie's kernels and schedules
// (in int64 or double, in rank order). Used by the in-process tests and by
// the multi-process worker.
#pragma once

#include <string>
#include <vector>

#include <collie/process_group.hpp>

namespace collie::test {

struct CollectiveCase {
  Collective collective = Collective::AllReduce;
  Algorithm algorithm = Algorithm::Auto;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  std::size_t count = 0;  // per rank, as the collective counts it
  int root = 0;
  bool in_place = false;  // the in-place form, where there is one
  bool async = false;     // through *_async and Work::wait()
};

// "all_reduce ring float32 sum count 1009 root 0 out-of-place"
std::string describe(const CollectiveCase& c);

// Runs the case on `pg`; returns the number of wrong elements, and (in
// `first`) what the first one was.
std::size_t run_and_check(ProcessGroup& pg, const CollectiveCase& c, std::string& first);

// Every case of the matrix for a world of `world` ranks: every collective x
// algorithm x dtype x op at a count that spans several segments, then edge
// counts (0, 1, fewer than the ranks), every root, in-place forms and async.
// `full` false: one dtype and op per algorithm (for the sanitizer builds).
std::vector<CollectiveCase> matrix(int world, bool full);

}  // namespace collie::test
