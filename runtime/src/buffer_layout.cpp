// How one call's buffers become the working buffer its schedule addresses,
// and what is copied out at the end (buffer_layout.hpp).
#include "buffer_layout.hpp"

#include <algorithm>
#include <cstring>

namespace collie {

using collectives::Range;
using collectives::Schedule;

namespace {

// The extent of [0, limit) that a schedule touches (for scratch memory).
Range touched_below(const Schedule& s, std::size_t limit) {
  std::size_t lo = limit, hi = 0;
  auto see = [&](const Range& r) {
    if (r.count == 0 || r.offset >= limit) return;
    lo = std::min(lo, r.offset);
    hi = std::max(hi, std::min(r.offset + r.count, limit));
  };
  for (const auto& st : s.steps) {
    for (const auto& t : st.sends)
      see(t.range);
    for (const auto& t : st.recvs)
      see(t.range);
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

}  // namespace

BufferLayout::BufferLayout(const Call& call, const Schedule& schedule, int rank, int world,
                           device::Engine* engine, std::size_t segment_bytes,
                           std::size_t whole_bytes)
    : call_(call),
      rank_(rank),
      world_(world),
      engine_(engine),
      segment_bytes_(segment_bytes),
      whole_bytes_(whole_bytes) {
  const std::size_t es = dtype_size(call.dtype);
  const auto bytes = call.count * es;
  const auto nc = static_cast<std::size_t>(world) * call.count;
  auto* in = static_cast<std::byte*>(const_cast<void*>(call.input));
  auto* out = static_cast<std::byte*>(call.output);
  int in_dev = call.input_device;
  const int out_dev = call.output_device;
  const bool root = rank == call.root;
  const bool avg = call.op == ReduceOp::Avg;
  // An out-of-place call starts from its input in its output; a small
  // output on a device gets it when it is staged, below (one copy fewer).
  const bool whole = out_dev >= 0 && engine_ != nullptr && bytes <= whole_bytes_;
  bool input_pending = false;
  auto copy_input_to_output = [&] {
    if (in == out || bytes == 0) return;
    if (whole)
      input_pending = true;
    else
      device::copy(engine_, out, out_dev, in, in_dev, bytes);
  };
  // A working copy of `n` elements of the input, in host memory.
  auto working_copy = [&](std::size_t n) {
    scratch_.resize(n * es);
    device::copy(engine_, scratch_.data(), -1, in, in_dev, n * es);
    return scratch_.data();
  };

  switch (call.collective) {
    case Collective::AllReduce:
    case Collective::Broadcast:
      copy_input_to_output();
      regions_.push_back({0, call.count, out, out_dev});
      result_ = out;
      result_device_ = out_dev;
      break;
    case Collective::Reduce:
      if (root) {
        copy_input_to_output();
        regions_.push_back({0, call.count, out, out_dev});
        result_ = out;
        result_device_ = out_dev;
      } else if (writes(schedule) || (avg && call.dtype == DataType::Float16)) {
        // A partial result passes through this rank: not in the caller's input.
        regions_.push_back({0, call.count, working_copy(call.count), -1});
      } else {
        regions_.push_back({0, call.count, in, in_dev});  // read only
      }
      break;
    case Collective::ReduceScatter:
      // The algorithms reduce in a buffer of every block: a copy of the input.
      regions_.push_back({0, nc, working_copy(nc), -1});
      result_ = out;
      result_device_ = out_dev;
      break;
    case Collective::AllGather:
      regions_.push_back({0, nc, out, out_dev});
      regions_.push_back({nc, call.count, in, in_dev});
      break;
    case Collective::Gather:
    case Collective::Scatter: {
      const bool gather = call.collective == Collective::Gather;
      // This rank's block, outside the n blocks.
      std::byte* own = gather ? in : out;
      const int own_dev = gather ? in_dev : out_dev;
      if (root) {
        regions_.push_back({0, nc, gather ? out : in, gather ? out_dev : in_dev});
      } else {
        const auto hull = touched_below(schedule, nc);
        scratch_.resize(hull.count * es);
        if (hull.count > 0) regions_.push_back({hull.offset, hull.count, scratch_.data(), -1});
      }
      regions_.push_back({nc, call.count, own, own_dev});
      break;
    }
    case Collective::AllToAll:
      if (overlapping(in, nc * es, out, nc * es)) {
        in = working_copy(nc);
        in_dev = -1;
      }
      regions_.push_back({0, nc, in, in_dev});
      regions_.push_back({nc, nc, out, out_dev});
      break;
    case Collective::Barrier:
      regions_.push_back({0, 1, &token_, -1});
      break;
  }
  // Device regions of whole_bytes_ at most (4 MiB) are staged whole: one
  // copy in now and one out in finish(), instead of copies at every step
  // (a small call's time is its copies' latency; measured on an H100, 1 to
  // 4 MiB all_reduce took 1.6 to 2 times the host time segment by segment).
  // About the pinned memory the segmented path holds at its peak.
  if (engine_ != nullptr) {
    device::Engine::Ticket last = 0;
    for (auto& r : regions_) {
      const std::size_t b = r.count * es;
      if (r.device < 0 || b == 0 || b > whole_bytes_) continue;
      const Staged st{r.data, b, r.data == out, engine_->take_pinned(b)};
      staged_.push_back(st);
      if (r.data == out && input_pending) {  // the input, straight into the block
        if (in_dev >= 0)
          last = engine_->to_host(st.block, in, b);
        else
          std::memcpy(st.block, in, b);
        input_pending = false;
      } else {
        last = engine_->to_host(st.block, r.data, b);
      }
      if (result_ == r.data) {
        result_ = st.block;
        result_device_ = -1;
      }
      r.data = st.block;
      r.device = -1;
    }
    if (last != 0) engine_->wait(last);
  }
  if (input_pending) device::copy(engine_, out, out_dev, in, in_dev, bytes);  // (not staged)
  if (avg && collectives::reduces(call.collective)) {
    // float16's share of the average comes off before the sum (reduce.hpp),
    // in the one region of a reduction: always the working copy (a reduce's
    // read-only input is never used for float16 averages, above).
    const auto& r = regions_.front();
    if (r.device < 0) {
      prescale_average(call.dtype, r.data, r.count, world);
    } else {
      device::transform(
          *engine_, r.data, r.count, es, segment_bytes_,
          [&](std::byte* block, std::size_t n) { prescale_average(call.dtype, block, n, world); });
    }
  }
}

void BufferLayout::finish() {
  const std::size_t es = dtype_size(call_.dtype);
  const bool average = call_.op == ReduceOp::Avg && result_ != nullptr &&
                       (call_.collective != Collective::Reduce || rank_ == call_.root);
  if (call_.collective == Collective::ReduceScatter) {
    // The own block is finished in the working copy, then copied out.
    if (call_.count == 0) return;
    std::byte* own = scratch_.data() + static_cast<std::size_t>(rank_) * call_.count * es;
    if (average) finish_average(call_.dtype, own, call_.count, world_);
    device::copy(engine_, call_.output, call_.output_device, own, -1, call_.count * es);
    return;
  }
  if (!average) {
    copy_back();
    return;
  }
  if (result_device_ < 0) {
    finish_average(call_.dtype, result_, call_.count, world_);
  } else {
    device::transform(
        *engine_, result_, call_.count, es, segment_bytes_,
        [&](std::byte* block, std::size_t n) { finish_average(call_.dtype, block, n, world_); });
  }
  copy_back();
}

void BufferLayout::copy_back() {
  device::Engine::Ticket last = 0;
  bool any = false;
  for (const auto& st : staged_) {
    if (!st.output) continue;
    last = engine_->to_device(st.device_data, st.block, st.bytes);
    any = true;
  }
  if (any) engine_->wait(last);
}

BufferLayout::~BufferLayout() {
  if (staged_.empty()) return;
  engine_->drain();  // nothing may still write from (or into) a block
  for (const auto& st : staged_)
    engine_->give_pinned(st.block);
}

}  // namespace collie
