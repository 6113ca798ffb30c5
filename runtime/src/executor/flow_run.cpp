// The dataflow run loop: runs host steps as the graph of flow_graph.hpp
// allows, starting every op whose blockers are done and waiting for
// whichever posted op finishes first. A receive that reduces is consumed
// where it arrives (irecv_consume): the bytes are combined straight from
// the transport's buffer, with no scratch copy.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "executor/stream_reduce.hpp"
#include "call_run.hpp"
#include "plan/flow_graph.hpp"

namespace collie {

namespace {

// What one thread's flows keep between calls (a thread runs one collective
// at a time; the transport's consumers touch none of it): no allocation per
// call once the vectors have grown.
struct FlowScratch {
  flow::Graph graph;
  std::vector<transport::RequestPtr> requests;       // by op: its request once posted
  std::vector<Tracer::Clock::time_point> posted_at;  // by op, when tracing
  std::vector<std::uint32_t> inflight;               // ops posted, not yet seen done, in posting order
  std::vector<transport::RequestPtr> watch;          // their requests
  // By op: a receive that reduces consumes through its reducer here, so
  // that the consumer handed to the transport is one pointer (a
  // std::function holds that without allocating).
  std::vector<StreamReducer> reducers;
};

FlowScratch& flow_scratch() {
  static thread_local FlowScratch scratch;
  return scratch;
}

constexpr std::uint32_t kStarted = UINT32_MAX;  // in `ready`: started already

class FlowRun {
 public:
  FlowRun(CallRun& run, const collectives::Schedule& schedule, std::size_t first,
          std::size_t last, const flow::Graph* built)
      : run_(run), first_(first) {
    if (built != nullptr) {
      flow::copy_built(*built, s_.graph);
    } else {
      flow::build(schedule, first, last, run.segment, run.g.members.size(), s_.graph);
    }
    snapshot_ = run.snapshot_space(s_.graph.snapshot_count);
    s_.requests.assign(ops_.size(), nullptr);
    s_.reducers.resize(std::max(s_.reducers.size(), ops_.size()));
    if (run.trace) s_.posted_at.assign(ops_.size(), {});
    // Room for every op at once, so that no run grows these while it runs
    // (how many are in flight at a time depends on timing).
    s_.inflight.clear();
    s_.watch.clear();
    s_.inflight.reserve(ops_.size());
    s_.watch.reserve(ops_.size());
    s_.graph.ready.reserve(ops_.size());
  }
  // The requests go (the call's own lists keep what abandon() needs).
  ~FlowRun() {
    s_.requests.clear();
    s_.watch.clear();
  }

  void run() {
    std::size_t next_ready = 0;
    span_begin_ = run_.mark();
    auto slice = std::chrono::milliseconds(20);
    while (finished_ < ops_.size()) {
      bool moved = false;
      // Start what may start (a copy is done at once, and may free more).
      // Receives first: they cost nothing to post, and a peer's bytes then
      // find them, while sends are written (a send is written into the
      // kernel as it is posted; posted before the receives, the sends of a
      // step would fill both ways' socket buffers before anyone reads).
      while (next_ready < ready_.size()) {
        const std::size_t end = ready_.size();
        for (std::size_t k = next_ready; k < end; ++k) {
          const auto i = ready_[k];
          if (ops_[i].kind != flow::Op::Recv) continue;
          start(i);
          ready_[k] = kStarted;
        }
        for (std::size_t k = next_ready; k < end; ++k) {
          const auto i = ready_[k];
          if (i == kStarted) continue;
          start(i);
          if (ops_[i].kind == flow::Op::Copy) complete(i);
        }
        next_ready = end;
        moved = true;
      }
      ready_.clear();
      next_ready = 0;
      // Take what finished, in the order it was posted.
      std::size_t kept = 0;
      for (std::size_t k = 0; k < inflight_.size(); ++k) {
        const auto i = inflight_[k];
        auto& op = ops_[i];
        auto& request = s_.requests[i];
        if (!run_.transport.test(request)) {
          watch_[kept] = std::move(watch_[k]);
          inflight_[kept++] = i;
          continue;
        }
        if (op.kind == flow::Op::Recv) {
          run_.wait_recv(request, op.peer);  // checks who sent it; throws its error
          if (run_.trace) {
            // Receives overlap: each span runs from the later of its posting
            // and the thread's last span to when the thread saw it done.
            const auto now = run_.mark();
            run_.trace->event(Tracer::Kind::Recv, std::max({s_.posted_at[i], span_begin_, run_.lane}),
                              now, op.step, op.peer, op.range.count * run_.esize, op.reduce);
            run_.lane = now;
          }
        } else {
          run_.wait(request, op.peer);  // throws its error, if any
        }
        complete(i);
        moved = true;
      }
      inflight_.resize(kept);
      watch_.resize(kept);
      if (moved) {
        step_done();
        slice = std::chrono::milliseconds(20);
        continue;
      }
      if (inflight_.empty()) {
        throw Error(fmt::format(
            "rank {}: internal: {} #{} on {}: {} of {} segments are done, and none of the others "
            "is posted or may start (a dependency that never clears)",
            run_.g.rank, describe(run_.call.signature(), false), run_.call.sequence, run_.g.name,
            finished_, ops_.size()));
      }
      if (run_.transport.wait_any(watch_, std::min(slice, run_.remaining())) >= 0) continue;
      const auto oldest = inflight_.front();
      run_.idle(s_.requests[oldest], ops_[oldest].kind == flow::Op::Recv, ops_[oldest].peer);
      slice = std::min(slice * 2, std::chrono::milliseconds(500));
    }
    step_done();
    run_.forget_posted();
  }

 private:
  // Steps finish in order in the trace: a step's span runs from the end of
  // the one before to the moment it and every earlier step are done.
  void step_done() {
    auto& steps = s_.graph.steps;
    while (oldest_step_ < steps.size() && steps[oldest_step_].undone == 0) {
      if (run_.trace) {
        const auto now = run_.mark();
        run_.trace->event(Tracer::Kind::Step, span_begin_, now,
                          static_cast<std::uint32_t>(first_ + oldest_step_), -1, 0);
        span_begin_ = now;
      }
      ++oldest_step_;
    }
  }

  void complete(std::uint32_t i) {
    const auto& op = ops_[i];
    ++finished_;
    for (std::uint32_t e = op.first_edge; e < op.first_edge + op.edges; ++e)
      unblock(s_.graph.edges[e]);
    --s_.graph.steps[op.step - first_].undone;
  }

  void unblock(std::uint32_t i) {
    if (--ops_[i].blockers == 0) ready_.push_back(i);
  }

  // Posts op `i` (a copy is made at once).
  void start(std::uint32_t i) {
    auto& op = ops_[i];
    auto& request = s_.requests[i];
    const auto begin = run_.mark();
    const std::size_t bytes = op.range.count * run_.esize;
    switch (op.kind) {
      case flow::Op::Copy:
        device::copy(run_.engine, run_.at(op.range), run_.device_of(op.range),
                     op.initial ? run_.initial_at(op.from) : run_.at(op.from),
                     run_.device_of(op.from), bytes);
        if (run_.trace) {
          run_.lane = run_.mark();
          run_.trace->event(Tracer::Kind::Copy, begin, run_.lane, op.step, -1, bytes);
        }
        return;
      case flow::Op::Send: {
        const std::byte* data = op.initial ? run_.initial_at(op.range) : run_.at(op.range);
        if (op.snapshot) {
          std::byte* copy = snapshot_ + op.snap_at * run_.esize;
          std::memcpy(copy, data, bytes);
          data = copy;
        }
        request = run_.transport.isend(run_.peer(op.peer), run_.tag, data, bytes, run_.fingerprint);
        run_.posted_send(request);
        if (run_.trace) {
          run_.lane = run_.mark();
          run_.trace->event(Tracer::Kind::Send, begin, run_.lane, op.step, op.peer, bytes);
        }
        auto& step = s_.graph.steps[op.step - first_];
        if (step.snapshot && --step.unposted_sends == 0)
          for (std::uint32_t r = step.first_recv; r < step.end; ++r)
            unblock(r);
        break;
      }
      case flow::Op::Recv:
        if (op.reduce) {
          auto* reducer = &s_.reducers[i];
          std::byte* target = run_.at(op.range);
          const std::byte* initial = op.initial ? run_.initial_at(op.range) : nullptr;
          *reducer = StreamReducer{run_.call.dtype, run_.call.op, run_.esize, target,
                                   initial != target ? initial : nullptr};
          request = run_.transport.irecv_consume(
              run_.peer(op.peer), run_.tag, bytes,
              [reducer](std::size_t offset, std::span<const std::byte> piece) {
                (*reducer)(offset, piece);
              });
        } else {
          request = run_.transport.irecv(run_.peer(op.peer), run_.tag, run_.at(op.range), bytes);
        }
        run_.posted_recv(request);
        if (run_.trace) s_.posted_at[i] = begin;
        break;
    }
    inflight_.push_back(i);
    watch_.push_back(request);
    if (op.next_in_line >= 0) unblock(static_cast<std::uint32_t>(op.next_in_line));
  }

  CallRun& run_;
  std::size_t first_;
  FlowScratch& s_ = flow_scratch();
  std::vector<flow::Op>& ops_ = s_.graph.ops;
  std::vector<std::uint32_t>& ready_ = s_.graph.ready;  // ops that may start, in order
  std::vector<std::uint32_t>& inflight_ = s_.inflight;
  std::vector<transport::RequestPtr>& watch_ = s_.watch;
  std::byte* snapshot_ = nullptr;
  std::size_t finished_ = 0;
  std::size_t oldest_step_ = 0;  // steps[oldest_step_] is the first not done
  Tracer::Clock::time_point span_begin_{};
};

}  // namespace

void run_flow(CallRun& run, const collectives::Schedule& schedule, std::size_t first,
              std::size_t last, const flow::Graph* built) {
  FlowRun(run, schedule, first, last, built).run();
}

}  // namespace collie
