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
// Device memory: a region may lie on a CUDA device (Region::device); the
// executor stages it through pinned memory a segment at a time. Copies made
// here (an out-of-place call's input to its output, the working copies)
// go through the call's engine where a side is on a device; working copies
// are host memory, so only the caller's own buffers are ever staged. A
// device region of COLLIE_STAGE_WHOLE_BYTES or less (4 MiB) is staged whole
// here instead (one copy in, one out: a small call's time is its copies'
// latency). An
// average's division runs on the host, through the engine, segment by
// segment.
#pragma once

#include <cstddef>
#include <vector>

#include <collie/collectives/schedule.hpp>

#include "call.hpp"
#include "device/device.hpp"
#include "executor/executor.hpp"

namespace collie {

class BufferLayout {
 public:
  // Maps `call`'s buffers for `schedule`, this rank being `rank` of `world`;
  // copies inputs where the schedule needs a working copy, and takes a
  // float16 average's share off before the sum (reduce.hpp).
  // `engine` (null when every buffer is host memory) stages device buffers:
  // whole up to `whole_bytes`, else `segment_bytes` at a time.
  BufferLayout(const Call& call, const collectives::Schedule& schedule, int rank, int world,
               device::Engine* engine, std::size_t segment_bytes, std::size_t whole_bytes);
  ~BufferLayout();
  BufferLayout(const BufferLayout&) = delete;
  BufferLayout& operator=(const BufferLayout&) = delete;

  // The working buffer, for the executor.
  const std::vector<Region>& regions() const { return regions_; }

  // After the schedule: reduce_scatter's own block out of the working copy,
  // averages divided.
  void finish();

 private:
  // A small device region staged whole in a pinned block.
  struct Staged {
    std::byte* device_data;
    std::size_t bytes;
    bool output;  // copied back by finish()
    std::byte* block;
  };
  void copy_back();

  const Call& call_;
  int rank_;
  int world_;
  device::Engine* engine_;
  std::size_t segment_bytes_;
  std::size_t whole_bytes_;  // device regions up to this size are staged whole
  std::vector<std::byte> scratch_;
  std::vector<Region> regions_;
  std::byte* result_ = nullptr;  // where an average is finished
  int result_device_ = -1;
  std::byte token_{0};  // a barrier's one element
  std::vector<Staged> staged_;
};

}  // namespace collie
