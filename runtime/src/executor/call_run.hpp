// One call being run: what the executor's parts share (the host dataflow,
// flow_run.cpp; staged device steps, staged_step.cpp; the failure handling,
// executor.cpp): the call's tag, fingerprint and deadline, the working
// buffer's regions, the waits that check each message and name failures
// (through the call's Diagnosis), the requests in flight, and the pinned
// blocks of device staging. Used by the one thread that runs the call.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <collie/collectives/schedule.hpp>

#include "group/call.hpp"
#include "../device/device.hpp"
#include "group/group.hpp"
#include "watch/stall.hpp"
#include "watch/trace.hpp"
#include "diagnosis.hpp"
#include "plan/flow_graph.hpp"
#include "executor.hpp"

namespace collie {

class CallRun {
 public:
  using Clock = std::chrono::steady_clock;

  // `regions` outlive the run (the call's BufferLayout holds them).
  CallRun(detail::Group& g, const Call& call, std::span<const Region> regions);
  // Lets go of what is still in flight (abandon()) and gives the pinned
  // blocks back.
  ~CallRun();
  CallRun(const CallRun&) = delete;
  CallRun& operator=(const CallRun&) = delete;

  detail::Group& g;
  transport::Transport& transport;
  const Call& call;
  const std::size_t esize;         // bytes per element
  const std::uint64_t tag;         // of every message of the call
  const std::uint64_t fingerprint;  // of the call's signature (call.hpp)
  const std::size_t segment;       // elements
  const Clock::time_point deadline;  // read on the coarse clock (coarse_clock.hpp)
  StallCheck stall;
  Tracer* const trace;            // null: not tracing
  device::Engine* const engine;   // the plan's: stages device regions; null: none
  Diagnosis diagnosis;
  Tracer::Clock::time_point lane{};  // when the last send, receive or copy span ended

  // Where range `r` of the working buffer is, and on which device (-1: host).
  std::byte* at(const collectives::Range& r) const;
  int device_of(const collectives::Range& r) const;
  // Where range `r`'s initial contents are (Region::initial).
  const std::byte* initial_at(const collectives::Range& r) const;
  // The world rank of group rank `group_rank`.
  int peer(int group_rank) const { return g.members[static_cast<std::size_t>(group_rank)]; }
  std::chrono::milliseconds remaining() const;
  // Now, only when tracing (reading the clock is not free).
  Tracer::Clock::time_point mark() const {
    return trace != nullptr ? Tracer::now() : Tracer::Clock::time_point{};
  }

  // Waits for a request with group rank `with`, in slices (the stall
  // inspector looks between them); a failure is named (Diagnosis).
  void wait(const transport::RequestPtr& r, int with);
  // Waits for a receive from group rank `from` and checks who sent it: a
  // message of another call is a MismatchError naming both calls; a wait
  // that takes long looks for such messages queued under the call's tag.
  void wait_recv(const transport::RequestPtr& r, int from);
  // After a wait slice in which nothing finished: looks for news of a
  // mismatch or a failure, lets the stall inspector look, and past the
  // deadline (or when interrupted) throws the oldest request's error.
  void idle(const transport::RequestPtr& oldest, bool receive, int with);

  // Requests posted (settled by abandon() if the call fails).
  void posted_send(transport::RequestPtr r) { sends_.push_back(std::move(r)); }
  void posted_recv(transport::RequestPtr r) { recvs_.push_back(std::move(r)); }
  // The requests posted so far are all done.
  void forget_posted() {
    sends_.clear();
    recvs_.clear();
  }
  // After an error: withdraws (or gives up on) what is still in flight, so
  // that nothing writes into the buffers once this returns (nor, on a
  // device, a copy queued before).
  void abandon();

  // A pinned block of one segment, for this call.
  std::byte* take_block();
  void give_block(std::byte*& b);

  // Room for `elements` of snapshot (where sends of snapshot steps read
  // from); kept while sends may still read it.
  std::byte* snapshot_space(std::size_t elements);

  // What a thread's calls keep between them (a thread runs one call at a
  // time), so that a repeated call allocates nothing once these have grown.
  struct Kept {
    std::vector<transport::RequestPtr> sends, recvs;
    std::vector<std::byte> snapshot;
  };

 private:
  const Region& region_of(const collectives::Range& r) const;

  std::span<const Region> regions_;
  Kept& kept_;
  std::vector<transport::RequestPtr>& sends_;  // posted, until known done
  std::vector<transport::RequestPtr>& recvs_;
  std::vector<std::byte*> pinned_;       // this call's pinned blocks (one segment each)
  std::vector<std::byte*> blocks_free_;  // those of them not in use
};

// Runs schedule.steps[first, last), all on host memory, as one dataflow
// (flow_graph.hpp): `built`'s graph when given (the plan's, for these
// steps), else one built now. Throws what the waits throw.
void run_flow(CallRun& run, const collectives::Schedule& schedule, std::size_t first,
              std::size_t last, const flow::Graph* built = nullptr);

// Runs one step with device memory in it (executor.hpp says how).
void run_staged(CallRun& run, const collectives::Step& step, std::uint32_t index);

}  // namespace collie
