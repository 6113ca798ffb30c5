// Runs one rank's schedule of one call over the transport.
//
// Each step's sends are posted at once, cut into segments of
// COLLIE_SEGMENT_BYTES; its receives are cut the same way and posted in
// order. A segment that is copied lands in place; one that is reduced lands
// in one of a few scratch slots (kept by the group between calls) and is
// combined into place as soon as it is in, while later segments are still
// on the wire. Every received message's fingerprint is checked against this
// call's (a different one is a MismatchError naming both calls); a wait
// that takes long looks for such messages queued under the call's tag. A
// failure tells the peers (call.hpp's notices) so that they fail at once,
// naming the rank that died, instead of waiting for it.
#pragma once

#include <cstddef>
#include <vector>

#include <collie/collectives/schedule.hpp>

#include "call.hpp"
#include "group.hpp"

namespace collie {

// Elements [offset, offset + count) of the working buffer live at `data`
// (buffer_layout.hpp maps the caller's buffers and scratch memory so).
struct Region {
  std::size_t offset = 0;
  std::size_t count = 0;
  std::byte* data = nullptr;
};

// Runs `schedule` (this rank's, for `call`) on the working buffer that
// `regions` map. Throws what the transport throws (ConnectionError,
// TimeoutError, ProtocolError), or MismatchError; nothing writes into the
// regions once it returns or throws.
void execute_schedule(ProcessGroup::Impl& g, const Call& call,
                      const collectives::Schedule& schedule, std::vector<Region> regions);

}  // namespace collie
