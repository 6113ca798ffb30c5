// How one call's device buffers reach the host code that runs it: chosen
// once, when the call starts (plan_staging(), from collective.cpp), and
// carried on the call (Call::staging); nothing later decides again.
//
// Every strategy copies through pinned host memory on the call's engine
// (device.hpp), so that the schedule, the executor and the reduce kernels
// only ever address host memory:
//
//   Host      the buffer is host memory: nothing to stage.
//   Whole     a device buffer of COLLIE_STAGE_WHOLE_BYTES or less (4 MiB):
//             copied to a pinned block before the schedule runs, and the
//             output's back after it (whole_staging.hpp): a small call's
//             time is its copies' latency, so one copy each way (measured
//             on an H100, 1 to 4 MiB all_reduce took 1.6 to 2 times the
//             host time segment by segment).
//   Segments  a larger one: each step of the schedule that touches it runs
//             staged, a segment at a time, device copies overlapping the
//             network and the reductions (the executor's staged_step.cpp).
//   chunks    a whole call, not a buffer: an elementwise collective
//             (all_reduce, broadcast, reduce) larger than
//             COLLIE_STAGE_CHUNK_BYTES whose caller said it is on a device
//             (MemoryKind::Cuda) runs as host calls on chunks of that size,
//             each staged whole while the one before runs
//             (chunked_call.hpp). Only the caller's word decides it, so
//             that every rank cuts the call alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include <collie/memory.hpp>

#include "device.hpp"

namespace collie::device {

enum class Staging : std::uint8_t { Host, Whole, Segments };

struct StagingPlan {
  int input_device = -1;  // -1: host memory
  int output_device = -1;
  Staging input = Staging::Host;
  Staging output = Staging::Host;
  // > 0: the call runs in chunks of this many bytes (chunked_call.hpp),
  // each chunk a host call.
  std::size_t chunk_bytes = 0;
  // Stages the device buffers; null when both are host memory.
  std::shared_ptr<Engine> engine;

  bool in_chunks() const { return chunk_bytes > 0; }
};

// The buffers of one rank's call, as the collective's extents size them.
struct CallBuffers {
  const void* input = nullptr;
  std::size_t input_bytes = 0;
  const void* output = nullptr;
  std::size_t output_bytes = 0;
};

// The settings the choice reads (JobConfig's COLLIE_STAGE_WHOLE_BYTES and
// COLLIE_STAGE_CHUNK_BYTES).
struct StagingLimits {
  std::size_t whole_bytes = 0;
  std::size_t chunk_bytes = 0;  // 0: never in chunks
};

// Where the buffers are (place(), which lends the engine and orders it
// after `stream`), and how each is staged. `elementwise`: the collective
// acts element by element alike on every rank (collectives::elementwise()),
// so that it may run in chunks. Throws DeviceError as place() does.
StagingPlan plan_staging(EnginePool& pool, MemoryKind said, bool elementwise,
                         const CallBuffers& buffers, void* stream, const CallName& call,
                         std::chrono::milliseconds timeout, const StagingLimits& limits);

}  // namespace collie::device
