// A step that touches device memory, staged through pinned host blocks
// (executor.hpp says how): its copies, then each send segment copied to a
// block and sent from there, each receive landing in a block and reduced or
// copied there, then copied back to the device, with a few of each in
// flight so that device copies, the network and the host's reductions
// overlap.
#include <algorithm>
#include <vector>

#include <collie/error.hpp>

#include <collie/reduce.hpp>
#include "call_run.hpp"

namespace collie {

namespace {

using collectives::Combine;

constexpr std::size_t kStagedSends = 4;  // device send segments in flight
constexpr std::size_t kStagedRecvs = 8;  // staged receive segments posted or copying back

struct StagedSend {
  int to = 0;
  const std::byte* data = nullptr;  // where the segment is (host or device)
  std::size_t count = 0;
  bool device = false;
  std::byte* block = nullptr;  // its pinned copy, while it has one
  device::Engine::Ticket copied = 0;
  transport::RequestPtr request;
  enum { Queued, Copying, Sending, Done } state = Queued;
};

struct StagedRecv {
  std::size_t transfer = 0;
  int from = 0;
  std::byte* target = nullptr;
  std::size_t count = 0;
  bool reduce = false;
  bool device = false;
  std::byte* block = nullptr;        // where the message lands (unless straight into host memory)
  std::byte* target_copy = nullptr;  // a device target's segment, for a reduction
  device::Engine::Ticket target_copied = 0;
  device::Engine::Ticket written = 0;  // its copy back to the device
  transport::RequestPtr request;
  enum { Queued, Posted, Writing, Done } state = Queued;
};

}  // namespace

void run_staged(CallRun& run, const collectives::Step& step, std::uint32_t index) {
  auto* engine = run.engine;
  auto* trace = run.trace;
  const auto esize = run.esize;
  const auto segment = run.segment;
  const auto step_begin = run.mark();
  for (const auto& c : step.copies) {
    const auto begin = run.mark();
    device::copy(engine, run.at(c.to), run.device_of(c.to), run.at(c.from), run.device_of(c.from),
                 c.from.count * esize);
    if (trace) trace->event(Tracer::Kind::Copy, begin, run.mark(), index, -1, c.from.count * esize);
  }
  // Sends read from a host snapshot when a receive of this step lands
  // where they read. The snapshot is the call's own, so that it outlives
  // sends still under way when the step throws (abandon() gives them a
  // moment to finish).
  const bool snap = collectives::receives_overlap_sends(step);
  std::size_t snap_elements = 0;
  if (snap)
    for (const auto& t : step.sends)
      snap_elements += t.range.count;
  std::byte* snapshot = run.snapshot_space(snap_elements);
  std::vector<StagedSend> sends;
  std::size_t used = 0;
  for (const auto& t : step.sends) {
    const auto begin = run.mark();
    const std::byte* data = run.at(t.range);
    bool dev = run.device_of(t.range) >= 0;
    if (snap) {
      device::copy(engine, snapshot + used, -1, data, run.device_of(t.range),
                   t.range.count * esize);
      data = snapshot + used;
      used += t.range.count * esize;
      dev = false;
    }
    for (std::size_t done = 0; done < t.range.count; done += segment) {
      StagedSend x;
      x.to = t.peer;
      x.data = data + done * esize;
      x.count = std::min(segment, t.range.count - done);
      x.device = dev;
      sends.push_back(std::move(x));
    }
    if (trace)
      trace->event(Tracer::Kind::Send, begin, run.mark(), index, t.peer, t.range.count * esize);
  }
  std::vector<StagedRecv> recvs;
  for (std::size_t k = 0; k < step.recvs.size(); ++k) {
    const auto& t = step.recvs[k];
    std::byte* target = run.at(t.range);
    const bool dev = run.device_of(t.range) >= 0;
    for (std::size_t done = 0; done < t.range.count; done += segment) {
      StagedRecv r;
      r.transfer = k;
      r.from = t.peer;
      r.target = target + done * esize;
      r.count = std::min(segment, t.range.count - done);
      r.reduce = t.combine == Combine::Reduce;
      r.device = dev;
      recvs.push_back(r);
    }
  }

  auto& transport = run.transport;
  auto send = [&](StagedSend& x, const std::byte* from) {
    x.request = transport.isend(run.peer(x.to), run.tag, from, x.count * esize, run.fingerprint);
    run.posted_send(x.request);
    x.state = StagedSend::Sending;
  };
  // A receive that has arrived: checked, reduced into place or copied, and
  // its copy back to the device started.
  auto land = [&](StagedRecv& r) {
    run.wait_recv(r.request, r.from);  // checks who sent it; throws its error
    const auto begin = run.mark();
    if (r.reduce) {
      std::byte* into = r.target;
      if (r.device) {
        engine->wait(r.target_copied);
        into = r.target_copy;
      }
      reduce(run.call.dtype, run.call.op, into, r.block, r.count);
      if (trace) trace->event(Tracer::Kind::Reduce, begin, run.mark(), index, -1, r.count * esize);
      if (r.device) run.give_block(r.block);
    }
    if (r.device) {
      r.written =
          engine->to_device(r.target, r.reduce ? r.target_copy : r.block, r.count * esize);
      r.state = StagedRecv::Writing;
    } else {
      run.give_block(r.block);
      r.state = StagedRecv::Done;
    }
  };
  std::size_t send_next = 0;         // the next send to start
  std::size_t send_copying = 0;      // the oldest send whose copy may be pending
  std::size_t device_sends = 0;      // device sends holding a block
  std::vector<std::size_t> sending;  // device sends posted, not yet done (<= kStagedSends)
  std::size_t recv_next = 0;         // the next receive to post
  std::size_t recv_handled = 0;      // the oldest receive not yet handled
  std::size_t recv_done = 0;         // the oldest receive not done (its copy back may be pending)
  auto slice = std::chrono::milliseconds(20);
  for (;;) {
    bool moved = false;
    // Start sends: host ones at once, device ones as blocks allow.
    while (send_next < sends.size()) {
      auto& x = sends[send_next];
      if (x.device) {
        if (device_sends == kStagedSends) break;
        x.block = run.take_block();
        x.copied = engine->to_host(x.block, x.data, x.count * esize);
        x.state = StagedSend::Copying;
        ++device_sends;
      } else {
        send(x, x.data);
      }
      ++send_next;
      moved = true;
    }
    // Send the segments whose copies are done (they finish in order).
    for (; send_copying < send_next; ++send_copying) {
      auto& x = sends[send_copying];
      if (x.state != StagedSend::Copying) continue;
      if (!engine->done(x.copied)) break;
      send(x, x.block);
      sending.push_back(send_copying);
      moved = true;
    }
    // A device send that has finished gives its block back.
    for (std::size_t j = 0; j < sending.size();) {
      auto& x = sends[sending[j]];
      if (!transport.test(x.request)) {
        ++j;
        continue;
      }
      run.wait(x.request, x.to);  // throws its error, if any
      run.give_block(x.block);
      x.state = StagedSend::Done;
      --device_sends;
      sending.erase(sending.begin() + static_cast<std::ptrdiff_t>(j));
      moved = true;
    }
    // Post receives in order, kStagedRecvs at a time (those copying back
    // count: they hold blocks).
    while (recv_next < recvs.size() && recv_next - recv_done < kStagedRecvs) {
      auto& r = recvs[recv_next];
      std::byte* into = r.target;
      if (r.reduce || r.device) into = r.block = run.take_block();
      if (r.reduce && r.device) {
        r.target_copy = run.take_block();
        r.target_copied = engine->to_host(r.target_copy, r.target, r.count * esize);
      }
      r.request = transport.irecv(run.peer(r.from), run.tag, into, r.count * esize);
      run.posted_recv(r.request);
      r.state = StagedRecv::Posted;
      ++recv_next;
      moved = true;
    }
    // Receives that have arrived, in order (several copies back may be in
    // flight).
    while (recv_handled < recv_next && transport.test(recvs[recv_handled].request)) {
      land(recvs[recv_handled]);
      ++recv_handled;
      moved = true;
    }
    // Copies back that have finished, in order, free their blocks.
    while (recv_done < recv_handled) {
      auto& r = recvs[recv_done];
      if (r.state == StagedRecv::Writing) {
        if (!engine->done(r.written)) break;
        run.give_block(r.block);
        run.give_block(r.target_copy);
        r.state = StagedRecv::Done;
        moved = true;
      }
      if (trace && (recv_done + 1 == recvs.size() || recvs[recv_done + 1].transfer != r.transfer)) {
        const auto& t = step.recvs[r.transfer];
        trace->event(Tracer::Kind::Recv, step_begin, run.mark(), index, t.peer,
                     t.range.count * esize, t.combine == Combine::Reduce);
      }
      ++recv_done;
    }
    const bool sends_left = send_next < sends.size() || device_sends > 0;
    if (!sends_left && recv_done == recvs.size()) break;
    if (moved) {
      slice = std::chrono::milliseconds(20);
      continue;
    }
    // Nothing moved. A device copy finishes on its own: wait for the oldest
    // one something waits on.
    if (send_copying < send_next && sends[send_copying].state == StagedSend::Copying) {
      engine->wait(sends[send_copying].copied);
      continue;
    }
    if (recv_done < recv_handled && recvs[recv_done].state == StagedRecv::Writing) {
      engine->wait(recvs[recv_done].written);
      continue;
    }
    // Else the network: the oldest receive, or a send holding a block.
    std::vector<transport::RequestPtr> watch;
    int first_peer = -1;
    if (recv_handled < recv_next) {
      watch.push_back(recvs[recv_handled].request);
      first_peer = recvs[recv_handled].from;
    }
    for (std::size_t i : sending) {
      watch.push_back(sends[i].request);
      if (first_peer < 0) first_peer = sends[i].to;
    }
    if (watch.empty()) throw Error("internal: a staged step waits on nothing");
    if (transport.wait_any(watch, std::min(slice, run.remaining())) < 0) {
      run.idle(watch.front(), recv_handled < recv_next, first_peer);
      slice = std::min(slice * 2, std::chrono::milliseconds(500));
    }
  }
  // Host sends: wait for them now, as an unstaged step does.
  const auto wait_begin = run.mark();
  for (const auto& x : sends)
    if (x.state == StagedSend::Sending) run.wait(x.request, x.to);
  if (trace) {
    const auto end = run.mark();
    if (!step.sends.empty()) trace->event(Tracer::Kind::WaitSends, wait_begin, end, index, -1, 0);
    trace->event(Tracer::Kind::Step, step_begin, end, index, -1, 0);
  }
  run.forget_posted();
}

}  // namespace collie
