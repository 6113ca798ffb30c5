// The collectives: choose an algorithm, lay the caller's buffers out as the
// schedule expects, and execute the schedule over the transport, segment by
// segment, checking every message's fingerprint.
#include <algorithm>
#include <bit>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>

#include "group.hpp"

namespace collie {

using collectives::Combine;
using collectives::Range;
using collectives::Schedule;
using collectives::Shape;
using Clock = std::chrono::steady_clock;

namespace {

// ---- fingerprints: what a call was, in 64 bits, carried by every message ----
//   bits 60-63 collective, 56-59 dtype, 52-55 reduce op, 48-51 algorithm,
//   32-47 root (low 16 bits), 0-31 count (low 32 bits)
struct Signature {
  Collective collective = Collective::Barrier;
  DataType dtype = DataType::UInt8;
  ReduceOp op = ReduceOp::Sum;
  Algorithm algorithm = Algorithm::Auto;
  int root = 0;
  std::uint64_t count = 0;
};

std::uint64_t encode(const Signature& s) {
  return (static_cast<std::uint64_t>(s.collective) << 60) |
         (static_cast<std::uint64_t>(s.dtype) << 56) |
         (static_cast<std::uint64_t>(s.op) << 52) |
         (static_cast<std::uint64_t>(s.algorithm) << 48) |
         (static_cast<std::uint64_t>(static_cast<std::uint16_t>(s.root)) << 32) |
         (s.count & 0xffffffffu);
}

Signature decode(std::uint64_t f) {
  Signature s;
  s.collective = static_cast<Collective>((f >> 60) & 0xf);
  s.dtype = static_cast<DataType>((f >> 56) & 0xf);
  s.op = static_cast<ReduceOp>((f >> 52) & 0xf);
  s.algorithm = static_cast<Algorithm>((f >> 48) & 0xf);
  s.root = static_cast<int>((f >> 32) & 0xffff);
  s.count = f & 0xffffffffu;
  return s;
}

// "all_reduce(float32, 1024, sum)", "broadcast(float32, 1024, root=0)",
// "barrier()"; with the algorithm when asked.
std::string describe(const Signature& s, bool with_algorithm) {
  const auto c = s.collective;
  std::string out = fmt::format("{}(", collectives::collective_name(c));
  if (c != Collective::Barrier) {
    out += fmt::format("{}, {}", dtype_name(s.dtype), s.count);
    if (collectives::reduces(c)) out += fmt::format(", {}", reduce_op_name(s.op));
    if (collectives::has_root(c)) out += fmt::format(", root={}", s.root);
  }
  out += ")";
  if (with_algorithm) out += fmt::format(" with {}", collectives::algorithm_name(s.algorithm));
  return out;
}

// Notices: a rank whose collective failed tells its peers in that
// collective with a 0-byte message on the same tag, so that they fail at
// once instead of waiting for messages that will never come.
// - After a mismatch it sends the rank whose message did not match its own
//   fingerprint: that rank then sees the mismatch too, naming both calls.
// - After a connection failure it sends every other peer of the schedule a
//   failure notice (collective field 0xf, low bits: the world rank that
//   failed); they pass it on, so the news spreads along the algorithm's own
//   links, each rank naming the rank that failed.
constexpr std::uint64_t kNotice = std::uint64_t{0xf} << 60;

std::uint64_t failure_notice(int world_rank) {
  return kNotice | static_cast<std::uint32_t>(world_rank);
}
bool is_failure_notice(std::uint64_t f) {
  return (f >> 60) == 0xf;
}

// ---- one call ----

struct Call {
  Collective collective = Collective::Barrier;
  DataType dtype = DataType::UInt8;
  const void* input = nullptr;
  void* output = nullptr;
  std::size_t count = 0;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  Algorithm algorithm = Algorithm::Auto;
  std::uint64_t sequence = 0;
  std::chrono::milliseconds timeout{0};

  Signature signature() const {
    return Signature{collective, dtype, op, algorithm, root, count};
  }
};

// Elements [offset, offset + count) of the working buffer live at `data`.
struct Region {
  std::size_t offset = 0;
  std::size_t count = 0;
  std::byte* data = nullptr;
};

// Runs one schedule over the transport.
class Executor {
 public:
  Executor(ProcessGroup::Impl& g, const Call& call, std::vector<Region> regions)
      : g_(g),
        transport_(g.transport()),
        call_(call),
        regions_(std::move(regions)),
        esize_(dtype_size(call.dtype)),
        tag_(collective_tag(g.slot, call.sequence)),
        fingerprint_(encode(call.signature())),
        segment_(std::max<std::size_t>(1, g.world->config.segment_bytes / esize_)),
        deadline_(Clock::now() + call.timeout),
        trace_(g.world->tracer.get()) {
    for (std::size_t i = 0; i < kWindow; ++i) free_slots_.push_back(i);
    std::lock_guard lock(g_.slots_mu);
    for (auto& slot : slots_) {
      if (g_.spare_slots.empty()) break;
      slot = std::move(g_.spare_slots.back());
      g_.spare_slots.pop_back();
    }
  }

  ~Executor() {
    abandon();
    std::lock_guard lock(g_.slots_mu);
    for (auto& slot : slots_)
      if (!slot.empty() && g_.spare_slots.size() < 2 * kWindow) g_.spare_slots.push_back(std::move(slot));
  }

  void run(const Schedule& schedule) {
    try {
      for (std::size_t i = 0; i < schedule.steps.size(); ++i)
        run_step(schedule.steps[i], static_cast<std::uint32_t>(i));
    } catch (const MismatchError&) {
      // Everyone should know what this rank called: the rank whose message
      // did not match, and the others, which may wait for this one.
      abandon();
      std::vector<int> peers;
      if (mismatched_from_ >= 0) peers.push_back(mismatched_from_);
      const int n = static_cast<int>(g_.members.size());
      if (n <= 64)
        for (int p = 0; p < n; ++p)
          if (p != g_.rank && p != mismatched_from_) peers.push_back(p);
      notify(peers, fingerprint_);
      throw;
    } catch (const ConnectionError&) {
      abandon();
      if (failed_world_rank_ >= 0) {
        std::vector<int> peers;
        for (const auto& step : schedule.steps)
          for (const auto* list : {&step.sends, &step.recvs})
            for (const auto& t : *list)
              if (peer(t.peer) != failed_world_rank_ &&
                  std::find(peers.begin(), peers.end(), t.peer) == peers.end())
                peers.push_back(t.peer);
        notify(peers, failure_notice(failed_world_rank_));
      }
      throw;
    }
  }

 private:
  static constexpr std::size_t kWindow = 4;  // reduce segments received ahead
  // How long a broken connection waits for a mismatched message that would
  // explain it.
  static constexpr std::chrono::milliseconds kMismatchGrace{250};

  struct Pending {
    transport::RequestPtr request;
    int peer = 0;  // group rank
  };

  std::byte* at(const Range& r) const {
    for (const auto& region : regions_) {
      if (r.offset >= region.offset && r.offset + r.count <= region.offset + region.count)
        return region.data + (r.offset - region.offset) * esize_;
    }
    throw Error(fmt::format("internal: range [{}, {}) of the working buffer is not mapped",
                            r.offset, r.offset + r.count));
  }

  int peer(int group_rank) const { return g_.members[static_cast<std::size_t>(group_rank)]; }

  std::chrono::milliseconds remaining() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now());
    return std::max(left, std::chrono::milliseconds(0));
  }

  std::string mismatch(int from, std::uint64_t theirs) const {
    const auto mine = call_.signature();
    const auto other = decode(theirs);
    // The algorithm matters only when it is all that differs.
    const bool algo = describe(mine, false) == describe(other, false);
    return fmt::format("rank {}: collective #{} on {} does not match: rank {} called {} but rank {} "
                       "called {}",
                       g_.rank, call_.sequence, g_.name, from, describe(other, algo), g_.rank,
                       describe(mine, algo));
  }

  // Waits for a request with group rank `with`; remembers who failed.
  void wait(const transport::RequestPtr& r, int with) {
    try {
      transport_.wait(r, remaining());
    } catch (const ConnectionError&) {
      if (failed_world_rank_ < 0) failed_world_rank_ = peer(with);
      throw;
    }
  }

  // Waits for a receive from group rank `from` and checks who sent it. A
  // wait that takes long looks, now and then, for a message under this
  // collective's tag from a rank it does not expect one from: a rank that
  // disagrees on the call (another root, say) may send where no one listens.
  void wait_recv(const transport::RequestPtr& r, int from) {
    bool size_differs = false;
    std::string size_error;
    try {
      auto slice = std::chrono::milliseconds(20);
      while (!transport_.wait_some(r, std::min(slice, remaining()))) {
        check_queued();
        if (remaining().count() == 0) {
          wait(r, from);  // throws the TimeoutError
          break;
        }
        slice = std::min(slice * 2, std::chrono::milliseconds(500));
      }
    } catch (const ConnectionError&) {
      // A peer that left may have left because it ran another call, whose
      // messages wait here or are on their way (perhaps over a connection
      // still being set up): the mismatch is the news. Look for a moment
      // (the background thread moves data meanwhile).
      const auto until = Clock::now() + kMismatchGrace;
      for (;;) {
        check_queued();
        if (Clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      if (failed_world_rank_ < 0) failed_world_rank_ = peer(from);
      throw;
    } catch (const RequestError& e) {  // a size mismatch: the fingerprint says why
      size_differs = true;
      size_error = e.what();
    }
    const auto theirs = transport_.fingerprint(r);
    if (is_failure_notice(theirs)) {
      check_queued();  // a mismatch seen by another rank explains more
      reported_failure(theirs, from);
    }
    if (theirs != fingerprint_) {
      mismatched_from_ = from;
      throw MismatchError(mismatch(from, theirs));
    }
    if (size_differs) {
      throw MismatchError(fmt::format(
          "{}; both ranks called {}, so they cut it into different segments: set "
          "COLLIE_SEGMENT_BYTES alike on every rank",
          size_error, describe(call_.signature(), true)));
    }
  }

  // Looks at messages under this collective's tag that no receive asked
  // for: another call's fingerprint is a mismatch (checked first: it is the
  // cause), a failure notice is news of a dead rank.
  void check_queued() {
    const auto queued = transport_.queued_fingerprints(tag_);
    for (bool notices : {false, true}) {
      for (const auto& [world_peer, theirs] : queued) {
        if (theirs == fingerprint_ || is_failure_notice(theirs) != notices) continue;
        const auto it = std::find(g_.members.begin(), g_.members.end(), world_peer);
        if (it == g_.members.end()) continue;
        const int from = static_cast<int>(it - g_.members.begin());
        if (notices) reported_failure(theirs, from);
        mismatched_from_ = from;
        throw MismatchError(mismatch(from, theirs));
      }
    }
  }

  // Group rank `from` sent a failure notice naming a dead rank.
  [[noreturn]] void reported_failure(std::uint64_t notice, int from) {
    failed_world_rank_ = static_cast<int>(notice & 0xffffffffu);
    throw ConnectionError(fmt::format(
        "rank {}: {} failed during this collective, as rank {} reported (its connection to it "
        "broke)",
        g_.rank, transport_.describe_peer(failed_world_rank_), from));
  }

  // Sends `fingerprint` in a 0-byte message to each of `peers` (group
  // ranks): all posted at once, then one second in all to hand them over.
  // Errors are logged, not thrown: the collective has already failed.
  void notify(const std::vector<int>& peers, std::uint64_t fingerprint) {
    const auto until = Clock::now() + std::chrono::seconds(1);
    std::vector<Pending> notices;
    for (int p : peers) {
      try {
        notices.push_back({transport_.isend(peer(p), tag_, nullptr, 0, fingerprint), p});
      } catch (const std::exception& e) {
        collie::log().debug("rank {}: telling rank {} about the failure: {}", g_.rank, p, e.what());
      }
    }
    for (const auto& n : notices) {
      try {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        transport_.wait(n.request, std::max(left, std::chrono::milliseconds(0)));
      } catch (const std::exception& e) {
        collie::log().debug("rank {}: telling rank {} about the failure: {}", g_.rank, n.peer,
                            e.what());
      }
    }
  }

  void post_send(int to, const std::byte* data, std::size_t count) {
    for (std::size_t done = 0; done < count; done += segment_) {
      const std::size_t n = std::min(segment_, count - done);
      sends_.push_back(
          {transport_.isend(peer(to), tag_, data + done * esize_, n * esize_, fingerprint_), to});
    }
  }

  struct Segment {
    std::size_t transfer = 0;  // index into the step's receives
    int from = 0;
    std::byte* target = nullptr;
    std::size_t count = 0;
    bool reduce = false;
    transport::RequestPtr request;
    std::size_t slot = 0;
  };

  // Now, only when tracing (reading the clock is not free).
  Tracer::Clock::time_point mark() const {
    return trace_ != nullptr ? Tracer::now() : Tracer::Clock::time_point{};
  }

  void run_step(const collectives::Step& step, std::uint32_t index) {
    const auto step_begin = mark();
    for (const auto& c : step.copies) {
      const auto begin = mark();
      std::memmove(at(c.to), at(c.from), c.from.count * esize_);
      if (trace_)
        trace_->event(Tracer::Kind::Copy, begin, mark(), index, -1, c.from.count * esize_);
    }
    // Sends go straight from the buffer, unless a receive of this step
    // lands where they read: then from a snapshot.
    std::vector<std::byte> snapshot;
    const bool snap = collectives::receives_overlap_sends(step);
    if (snap) {
      std::size_t total = 0;
      for (const auto& t : step.sends) total += t.range.count;
      snapshot.resize(total * esize_);
    }
    std::size_t used = 0;
    for (const auto& t : step.sends) {
      const auto begin = mark();
      const std::byte* data = at(t.range);
      if (snap) {
        std::memcpy(snapshot.data() + used, data, t.range.count * esize_);
        data = snapshot.data() + used;
        used += t.range.count * esize_;
      }
      post_send(t.peer, data, t.range.count);
      if (trace_)
        trace_->event(Tracer::Kind::Send, begin, mark(), index, t.peer, t.range.count * esize_);
    }
    // Receives, cut like the sender cut them, posted in order; a reduced
    // segment lands in one of kWindow scratch slots, so posting pauses while
    // every slot is taken (the order of posting is the order of matching).
    std::vector<Segment> segments;
    for (std::size_t k = 0; k < step.recvs.size(); ++k) {
      const auto& t = step.recvs[k];
      std::byte* target = at(t.range);
      for (std::size_t done = 0; done < t.range.count; done += segment_) {
        segments.push_back(Segment{k, t.peer, target + done * esize_,
                                   std::min(segment_, t.range.count - done),
                                   t.combine == Combine::Reduce, nullptr, 0});
      }
    }
    std::size_t posted = 0;
    auto post_more = [&] {
      while (posted < segments.size()) {
        auto& s = segments[posted];
        std::byte* into = s.target;
        if (s.reduce) {
          if (free_slots_.empty()) return;
          s.slot = free_slots_.back();
          free_slots_.pop_back();
          auto& slot = slots_[s.slot];  // grown on first use, kept for later steps
          if (slot.size() < s.count * esize_) slot.resize(s.count * esize_);
          into = slot.data();
        }
        s.request = transport_.irecv(peer(s.from), tag_, into, s.count * esize_);
        recvs_.push_back({s.request, s.from});
        ++posted;
      }
    };
    post_more();
    Tracer::Clock::time_point recv_begin;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      auto& s = segments[i];
      if (trace_ && (i == 0 || segments[i - 1].transfer != s.transfer)) recv_begin = mark();
      wait_recv(s.request, s.from);
      if (s.reduce) {
        const auto begin = mark();
        reduce(call_.dtype, call_.op, s.target, slots_[s.slot].data(), s.count);
        if (trace_) trace_->event(Tracer::Kind::Reduce, begin, mark(), index, -1, s.count * esize_);
        free_slots_.push_back(s.slot);
      }
      post_more();
      if (trace_ && (i + 1 == segments.size() || segments[i + 1].transfer != s.transfer)) {
        const auto& t = step.recvs[s.transfer];
        trace_->event(Tracer::Kind::Recv, recv_begin, mark(), index, t.peer,
                      t.range.count * esize_, t.combine == Combine::Reduce);
      }
    }
    const auto wait_begin = mark();
    for (const auto& send : sends_) wait(send.request, send.peer);
    if (trace_) {
      const auto end = mark();
      if (!step.sends.empty()) trace_->event(Tracer::Kind::WaitSends, wait_begin, end, index, -1, 0);
      trace_->event(Tracer::Kind::Step, step_begin, end, index, -1, 0);
    }
    sends_.clear();
    recvs_.clear();
  }

  // After an error: withdraw (or give up on) what is still in flight, so
  // that nothing writes into the buffers once this returns.
  void abandon() {
    for (auto* list : {&sends_, &recvs_}) {
      for (const auto& p : *list) {
        if (transport_.test(p.request)) continue;
        try {
          transport_.wait(p.request, std::chrono::milliseconds(0));
        } catch (const std::exception&) {
        }
      }
      list->clear();
    }
  }

  ProcessGroup::Impl& g_;
  transport::Transport& transport_;
  const Call& call_;
  std::vector<Region> regions_;
  std::size_t esize_;
  std::uint64_t tag_;
  std::uint64_t fingerprint_;
  std::size_t segment_;  // elements
  Clock::time_point deadline_;
  Tracer* trace_;  // null: not tracing
  std::vector<Pending> sends_;  // this step's, until waited for
  std::vector<Pending> recvs_;
  int failed_world_rank_ = -1;  // whose connection failed (seen here or reported)
  int mismatched_from_ = -1;    // the group rank whose message did not match
  std::vector<std::vector<std::byte>> slots_ = std::vector<std::vector<std::byte>>(kWindow);
  std::vector<std::size_t> free_slots_;
};

// The extent of [0, limit) that a schedule touches (for scratch memory).
Range touched_below(const Schedule& s, std::size_t limit) {
  std::size_t lo = limit, hi = 0;
  auto see = [&](const Range& r) {
    if (r.count == 0 || r.offset >= limit) return;
    lo = std::min(lo, r.offset);
    hi = std::max(hi, std::min(r.offset + r.count, limit));
  };
  for (const auto& st : s.steps) {
    for (const auto& t : st.sends) see(t.range);
    for (const auto& t : st.recvs) see(t.range);
    for (const auto& c : st.copies) {
      see(c.from);
      see(c.to);
    }
  }
  return lo < hi ? Range{lo, hi - lo} : Range{0, 0};
}

bool writes(const Schedule& s) {
  for (const auto& st : s.steps)
    if (!st.recvs.empty() || !st.copies.empty()) return true;
  return false;
}

bool overlapping(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// Lays the call's buffers out as the schedule expects, runs it, and puts the
// result where the caller wants it.
void execute(ProcessGroup::Impl& g, const Call& call) {
  Tracer* const trace = g.world->tracer.get();
  const auto begin = trace != nullptr ? Tracer::now() : Tracer::Clock::time_point{};
  const int n = static_cast<int>(g.members.size());
  const std::size_t es = dtype_size(call.dtype);
  const auto bytes = call.count * es;
  const auto nc = static_cast<std::size_t>(n) * call.count;
  const Shape shape{g.rank, n, call.count, call.root,
                    collectives::pieces_for(bytes, g.world->config.segment_bytes)};
  const Schedule schedule = collectives::make_schedule(call.collective, call.algorithm, shape);
  auto* in = static_cast<std::byte*>(const_cast<void*>(call.input));
  auto* out = static_cast<std::byte*>(call.output);
  const bool root = g.rank == call.root;
  const bool avg = call.op == ReduceOp::Avg;
  std::vector<std::byte> scratch;
  std::vector<Region> regions;
  std::byte* result = nullptr;  // where an Avg result is finished
  std::byte token{0};

  switch (call.collective) {
    case Collective::AllReduce:
    case Collective::Broadcast:
      if (in != out && bytes > 0) std::memcpy(out, in, bytes);
      regions.push_back({0, call.count, out});
      result = out;
      break;
    case Collective::Reduce:
      if (root) {
        if (in != out && bytes > 0) std::memcpy(out, in, bytes);
        regions.push_back({0, call.count, out});
        result = out;
      } else if (writes(schedule) || (avg && call.dtype == DataType::Float16)) {
        // A partial result passes through this rank: not in the caller's input.
        scratch.assign(in, in + bytes);
        regions.push_back({0, call.count, scratch.data()});
      } else {
        regions.push_back({0, call.count, in});  // read only
      }
      break;
    case Collective::ReduceScatter:
      // The algorithms reduce in a buffer of every block: a copy of the input.
      scratch.assign(in, in + nc * es);
      regions.push_back({0, nc, scratch.data()});
      result = out;
      break;
    case Collective::AllGather:
      regions.push_back({0, nc, out});
      regions.push_back({nc, call.count, in});
      break;
    case Collective::Gather:
    case Collective::Scatter: {
      const bool gather = call.collective == Collective::Gather;
      std::byte* own = gather ? in : out;  // this rank's block, outside the n blocks
      if (root) {
        regions.push_back({0, nc, gather ? out : in});
      } else {
        const auto hull = touched_below(schedule, nc);
        scratch.resize(hull.count * es);
        if (hull.count > 0) regions.push_back({hull.offset, hull.count, scratch.data()});
      }
      regions.push_back({nc, call.count, own});
      break;
    }
    case Collective::AllToAll:
      if (overlapping(in, nc * es, out, nc * es)) {
        scratch.assign(in, in + nc * es);
        in = scratch.data();
      }
      regions.push_back({0, nc, in});
      regions.push_back({nc, nc, out});
      break;
    case Collective::Barrier:
      regions.push_back({0, 1, &token});
      break;
  }
  if (avg && collectives::reduces(call.collective)) {
    // float16's share of the average comes off before the sum (reduce.hpp),
    // in the one region of a reduction: always the working copy (a reduce's
    // read-only input is never used for float16 averages, above).
    prescale_average(call.dtype, regions.front().data, regions.front().count, n);
  }
  Executor(g, call, std::move(regions)).run(schedule);
  if (call.collective == Collective::ReduceScatter && call.count > 0)
    std::memcpy(out, scratch.data() + static_cast<std::size_t>(g.rank) * call.count * es,
                call.count * es);
  if (avg && result != nullptr && (call.collective != Collective::Reduce || root))
    finish_average(call.dtype, result, call.count, n);
  if (trace != nullptr) {
    trace->collective(begin, Tracer::now(),
                      Tracer::CallInfo{call.collective, call.dtype, call.op, call.algorithm,
                                       call.root, call.count, call.sequence,
                                       g.trace_group,
                                       static_cast<std::uint32_t>(schedule.steps.size())});
  }
}

// Runs a call, turning transport errors into ones that name the collective,
// and breaking the group when messages may be left in flight.
void execute_checked(ProcessGroup::Impl& g, const Call& call) {
  {
    std::lock_guard lock(g.broken_mu);
    if (!g.broken.empty())
      throw Error(fmt::format("rank {}: {} on {}: the group is unusable since an earlier "
                              "collective failed: {}",
                              g.rank, describe(call.signature(), false), g.name, g.broken));
  }
  auto what = [&] {
    return fmt::format("{} #{} on {}", describe(call.signature(), false), call.sequence, g.name);
  };
  auto break_group = [&](const std::string& message) {
    std::lock_guard lock(g.broken_mu);
    if (g.broken.empty()) g.broken = message;
  };
  // The same error type, its message led by the call.
  auto named = [&]<class E>(const E& e) {
    const auto message = fmt::format("{}: {}", what(), e.what());
    break_group(message);
    return E(message);
  };
  try {
    execute(g, call);
  } catch (const MismatchError& e) {  // names the calls already
    break_group(e.what());
    throw;
  } catch (const TimeoutError& e) {
    throw named(e);
  } catch (const ProtocolError& e) {
    throw named(e);
  } catch (const ConnectionError& e) {
    throw named(e);
  }
}

// A collective running on the group's async thread.
class AsyncCollective final : public Work::State {
 public:
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::string what;
    std::chrono::milliseconds timeout{0};
  };
  explicit AsyncCollective(std::shared_ptr<Shared> s) : s_(std::move(s)) {}
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    std::unique_lock lock(s_->mu);
    const auto limit = timeout.value_or(s_->timeout + std::chrono::seconds(5));
    if (!s_->cv.wait_for(lock, limit, [&] { return s_->done; })) {
      throw TimeoutError(fmt::format("{} is still running after {} ms", s_->what, limit.count()));
    }
    if (s_->error) std::rethrow_exception(s_->error);
  }
  bool test() const override {
    std::lock_guard lock(s_->mu);
    return s_->done;
  }

 private:
  std::shared_ptr<Shared> s_;
};

std::uint64_t choice_key(Collective c, std::size_t es, std::size_t bytes) {
  const auto log = std::countr_zero(collectives::size_bucket(bytes));
  return (static_cast<std::uint64_t>(c) << 48) | (static_cast<std::uint64_t>(es) << 8) |
         static_cast<std::uint64_t>(log);
}

}  // namespace

Algorithm ProcessGroup::choose_algorithm(Collective c, DataType dtype, std::size_t count,
                                         int root) const {
  (void)root;  // every algorithm costs the same whichever rank is the root
  const auto& g = *impl_;
  for (const auto& [collective, algorithm] : g.world->config.algorithms)
    if (collective == c && algorithm != Algorithm::Auto) return algorithm;
  const auto& candidates = collectives::algorithms_for(c);
  if (candidates.size() == 1 || g.members.size() <= 1) return candidates.front();
  const std::size_t es = dtype_size(dtype);
  const auto key = choice_key(c, es, count * es);
  std::lock_guard lock(g.choice_mu);
  if (auto it = g.choices.find(key); it != g.choices.end()) return it->second;
  const Algorithm best =
      collectives::auto_algorithm(c, static_cast<int>(g.members.size()), count, es,
                                  g.world->config.segment_bytes, g.cost_model);
  g.choices.emplace(key, best);
  return best;
}

void ProcessGroup::check_equal(Collective c, std::size_t input, std::size_t output) const {
  if (input != output) {
    throw Error(fmt::format("rank {}: {}: the output has {} elements, the input {}: they must be "
                            "equal",
                            rank(), collectives::collective_name(c), output, input));
  }
}

void ProcessGroup::check_blocks(Collective c, std::size_t blocks, std::size_t block) const {
  const auto n = static_cast<std::size_t>(size());
  if (blocks != n * block) {
    throw Error(fmt::format("rank {}: {}: a buffer of {} elements for {} ranks of {}: it must "
                            "hold {} x {} = {}",
                            rank(), collectives::collective_name(c), blocks, n, block, n, block,
                            n * block));
  }
}

std::size_t ProcessGroup::check_all_to_all(std::size_t input, std::size_t output) const {
  const auto n = static_cast<std::size_t>(size());
  if (input != output || n == 0 || input % n != 0) {
    throw Error(fmt::format("rank {}: all_to_all: input of {} and output of {} elements: both "
                            "must hold {} equal blocks",
                            rank(), input, output, n));
  }
  return input / n;
}

Work ProcessGroup::run_collective(Collective c, DataType dtype, const void* input, void* output,
                                  std::size_t count, ReduceOp op, int root,
                                  const CollectiveOptions& o, bool async) {
  auto& g = *impl_;
  g.require_member(collectives::collective_name(c));
  const int n = size();
  if (collectives::reduces(c)) check_supported(dtype, op);
  if (collectives::has_root(c) && (root < 0 || root >= n)) {
    throw Error(fmt::format("rank {}: {}: root {} is not a rank of {} (ranks 0 to {})", rank(),
                            collectives::collective_name(c), root, g.name, n - 1));
  }
  Call call;
  call.collective = c;
  call.dtype = c == Collective::Barrier ? DataType::UInt8 : dtype;
  call.input = input;
  call.output = output;
  call.count = c == Collective::Barrier ? 1 : count;
  call.op = collectives::reduces(c) ? op : ReduceOp::Sum;
  if (c == Collective::Barrier) call.op = ReduceOp::BitwiseOr;
  call.root = collectives::has_root(c) ? root : 0;
  call.timeout = o.timeout.value_or(g.world->config.timeout);
  if (o.algorithm != Algorithm::Auto) {
    if (!collectives::implements(c, o.algorithm)) {
      throw Error(fmt::format("rank {}: {} has no algorithm '{}'; it has: {}", rank(),
                              collectives::collective_name(c),
                              collectives::algorithm_name(o.algorithm),
                              collectives::algorithm_list(c)));
    }
    call.algorithm = o.algorithm;
  } else {
    call.algorithm = choose_algorithm(c, call.dtype, call.count, call.root);
  }
  call.sequence = g.sequence++;
  if (!async) {
    execute_checked(g, call);
    return Work();
  }
  auto shared = std::make_shared<AsyncCollective::Shared>();
  shared->what = fmt::format("{} #{} on {}", describe(call.signature(), false), call.sequence,
                             g.name);
  shared->timeout = call.timeout;
  // The runner is the group's own, and finishes its queue before the group
  // goes: a plain pointer (a shared one would let the group die on its own
  // thread).
  g.runner.post([impl = &g, call, shared] {
    std::exception_ptr error;
    try {
      execute_checked(*impl, call);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard lock(shared->mu);
    shared->error = error;
    shared->done = true;
    shared->cv.notify_all();
  });
  return Work(std::make_unique<AsyncCollective>(std::move(shared)));
}

void ProcessGroup::barrier(const CollectiveOptions& o) {
  run_collective(Collective::Barrier, DataType::UInt8, nullptr, nullptr, 1, ReduceOp::BitwiseOr,
                 0, o, false);
}

Work ProcessGroup::barrier_async(const CollectiveOptions& o) {
  return run_collective(Collective::Barrier, DataType::UInt8, nullptr, nullptr, 1,
                        ReduceOp::BitwiseOr, 0, o, true);
}

}  // namespace collie
