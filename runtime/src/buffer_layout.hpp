// How one call's buffers become the working buffer its schedule addresses.
//
// A schedule speaks of one working buffer per rank, laid out per collective
// (collectives/algorithms.hpp: [buffer], [n blocks | own block]...). Here
// its ranges are mapped to memory: the caller's output, or input, wherever
// one can serve as it is; scratch memory where a partial result must not
// touch the caller's input (a reduce's intermediate rank, reduce_scatter's
// working copy of every block); only the part of the buffer the rank really
// touches (a gather's intermediate ranks of a tree). An out-of-place call
// copies its input to its output first. After the schedule has run,
// finish() puts the result where the caller wants it and completes
// averages.
//
// This is where device memory enters: a CUDA buffer is not addressable by
// the executor, so its regions will be staged through pinned host memory
// here (mapped to host segments, copied in before the schedule reads them
// and out after it writes them), and the executor keeps reading and writing
// host memory only.
#pragma once

#include <cstddef>
#include <vector>

#include <collie/collectives/schedule.hpp>

#include "call.hpp"
#include "executor.hpp"

namespace collie {

class BufferLayout {
 public:
  // Maps `call`'s buffers for `schedule`, this rank being `rank` of `world`;
  // copies inputs where the schedule needs a working copy, and takes a
  // float16 average's share off before the sum (reduce.hpp).
  BufferLayout(const Call& call, const collectives::Schedule& schedule, int rank, int world);
  BufferLayout(const BufferLayout&) = delete;
  BufferLayout& operator=(const BufferLayout&) = delete;

  // The working buffer, for the executor.
  const std::vector<Region>& regions() const { return regions_; }

  // After the schedule: reduce_scatter's own block out of the working copy,
  // averages divided.
  void finish();

 private:
  const Call& call_;
  int rank_;
  int world_;
  std::vector<std::byte> scratch_;
  std::vector<Region> regions_;
  std::byte* result_ = nullptr;  // where an average is finished
  std::byte token_{0};           // a barrier's one element
};

}  // namespace collie
