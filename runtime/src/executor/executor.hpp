// Runs one rank's schedule of one call over the transport: the runtime's
// one entry to the executor (this folder).
//
// Host steps run as a dataflow (flow_graph.hpp, flow_run.cpp): every copy,
// send and receive is an op, sends and receives cut into segments of
// COLLIE_SEGMENT_BYTES, and each op starts as soon as the earlier ops that
// touch its range are done (what it reads has been written; what it writes
// has been read and sent), with sends to a peer, and receives from it,
// posted in schedule order. So a ring forwards a segment as soon as it is
// reduced, and a step's receives are posted while the step before is still
// on the wire. A received segment that is reduced is combined straight from
// where the transport holds it (irecv_consume): no scratch copy. Every
// received message's fingerprint is checked against this call's (a
// different one is a MismatchError naming both calls); a wait that takes
// long looks for such messages queued under the call's tag. A failure
// tells the peers (diagnosis.hpp) so that they fail at once, naming the
// rank that died, instead of waiting for it. The calling thread drives the
// sockets for the whole call (Transport::claim_progress).
//
// A step that touches a region the call's plan stages by segments
// (device/staging.hpp: Segments) runs staged (staged_step.cpp): each
// send segment is copied to a pinned block and sent from there once its
// copy is done (a few in flight, later ones queued as blocks come free);
// each receive lands in a pinned block, and is reduced there with the
// target segment (copied out of the device when the receive was posted) or
// copied in, then copied back to the device. So copies of segment k+1
// overlap the network moving segment k and the host reducing segment k-1,
// and a call holds a few pinned segments, never a host copy of its buffer.
// The loop waits on whichever comes first: a device copy, the oldest
// receive, a send that holds a block.
#pragma once

#include <exception>

#include <cstddef>
#include <span>
#include <vector>

#include <collie/collectives/schedule.hpp>

#include "group/call.hpp"
#include "group/group.hpp"
#include "plan/plan_cache.hpp"

namespace collie {

// Elements [offset, offset + count) of the working buffer live at `data`
// (buffer_layout.hpp maps the caller's buffers and scratch memory so).
struct Region {
  std::size_t offset = 0;
  std::size_t count = 0;
  std::byte* data = nullptr;
  int device = -1;  // the CUDA device it is on; -1: host memory
  // Where its initial contents are when they were not copied into `data`
  // (flow_graph.hpp: the ops that meet them read them here); null: in
  // `data`.
  const std::byte* initial = nullptr;
};

// Runs `plan`'s schedule (this rank's, for `call`) on the working buffer that
// `regions` map; the call's plan's engine (Call::staging) stages the
// regions still on a device, segment by segment (buffer_layout.hpp staged
// the others already). Throws what the transport throws (ConnectionError,
// TimeoutError, ProtocolError), MismatchError, or DeviceError; nothing
// writes into the regions once it returns or throws. `failed_first`: a
// device error this rank met before the schedule (a chunk's copy,
// device/chunked_call.hpp), thrown at once and told to the peers as one met in it.
void execute_schedule(detail::Group& g, const Call& call, const Plan& plan,
                      std::span<const Region> regions,
                      std::exception_ptr failed_first = nullptr);

// After a call failed: lets go of its requests still in flight, so that
// none reads or writes the caller's buffers once this returns. Receives
// are withdrawn at once; sends under way get a second in all to finish
// (none when the wait was interrupted), then are withdrawn. Errors are
// the call's to report, not this one's: they are swallowed.
void settle_requests(transport::Transport& t, std::span<const transport::RequestPtr> receives,
                     std::span<const transport::RequestPtr> sends);

}  // namespace collie
