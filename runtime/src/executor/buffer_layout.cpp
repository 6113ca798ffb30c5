// How one call's buffers become the working buffer its schedule addresses,
// and what is copied out at the end (buffer_layout.hpp).
#include "executor/buffer_layout.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie {

using collectives::Range;
using collectives::Schedule;

namespace {

// The extent of `within` that a schedule touches (for scratch memory).
Range touched_within(const Schedule& s, Range within) {
  const std::size_t end = within.offset + within.count;
  std::size_t lo = end, hi = within.offset;
  auto see = [&](const Range& r) {
    if (r.count == 0 || r.offset >= end || r.offset + r.count <= within.offset) return;
    lo = std::min(lo, std::max(r.offset, within.offset));
    hi = std::max(hi, std::min(r.offset + r.count, end));
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
  return lo < hi ? Range{lo, hi - lo} : Range{within.offset, 0};
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

// Scratch buffers larger than this are given back when their call ends.
// Up to it a thread keeps them for its next call: a working copy of 16 MiB
// made afresh each call (an out-of-place reduce_scatter's input) cost the
// page faults of a new mapping every time, on crowded cores 6-60 ms before
// the first message (4 hosts x 2 ranks on 2 cores, 1 Gbit/s links:
// two_level 16 MiB took 125-139 ms, 100.7 the link's bound).
constexpr std::size_t kKeptScratchBytes = std::size_t{64} << 20;


bool inside(const Range& part, const Range& whole) {
  return part.offset >= whole.offset && part.offset + part.count <= whole.offset + whole.count;
}

// The piece of `pieces` (in order, contiguous) that holds all of `r`, if
// one does.
const InputPiece* piece_holding(std::span<const InputPiece> pieces, const Range& r) {
  auto it = std::upper_bound(pieces.begin(), pieces.end(), r.offset,
                             [](std::size_t off, const InputPiece& p) { return off < p.range.offset; });
  if (it == pieces.begin()) return nullptr;
  --it;
  return inside(r, it->range) ? &*it : nullptr;
}

}  // namespace

std::vector<InputPiece> input_pieces(const Schedule& schedule, collectives::Collective collective,
                                     const collectives::Shape& shape) {
  using Kind = InputPiece::Kind;
  const auto layout = collectives::layout(collective, shape);
  const Range input = layout.input, output = layout.output;
  if (input.count == 0 || input == output || !inside(output, input)) return {};
  // What the schedule writes, merged.
  std::vector<Range> written;
  for (const auto& st : schedule.steps) {
    for (const auto& t : st.recvs)
      written.push_back(t.range);
    for (const auto& c : st.copies)
      written.push_back(c.to);
  }
  std::erase_if(written, [](const Range& r) { return r.count == 0; });
  for (const auto& r : written)
    if (!inside(r, input)) return {};
  std::sort(written.begin(), written.end(),
            [](const Range& a, const Range& b) { return a.offset < b.offset; });
  // The pieces' bounds: the input's, the output's, the written ranges'
  // (none inside the output, which is one piece).
  const std::size_t out_end = output.offset + output.count;
  std::vector<std::size_t> bounds{input.offset, input.offset + input.count, output.offset,
                                  out_end};
  for (const auto& r : written) {
    for (const std::size_t b : {r.offset, r.offset + r.count})
      if (b <= output.offset || b >= out_end) bounds.push_back(b);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  std::vector<InputPiece> pieces;
  std::size_t w = 0;  // the first written range that may reach past a bound
  for (std::size_t i = 0; i + 1 < bounds.size(); ++i) {
    const Range r{bounds[i], bounds[i + 1] - bounds[i]};
    while (w < written.size() && written[w].offset + written[w].count <= r.offset)
      ++w;
    Kind kind = Kind::Caller;
    if (r.offset == output.offset && r.count == output.count)
      kind = Kind::Output;
    else {
      for (std::size_t j = w; j < written.size() && written[j].offset < r.offset + r.count; ++j)
        if (overlap(written[j], r)) kind = Kind::Scratch;
    }
    if (!pieces.empty() && kind != Kind::Output && pieces.back().kind == kind)
      pieces.back().range.count += r.count;
    else
      pieces.push_back({r, kind});
  }
  // Every range the schedule touches must lie in one piece.
  for (const auto& st : schedule.steps) {
    for (const auto* side : {&st.sends, &st.recvs})
      for (const auto& t : *side)
        if (t.range.count > 0 && piece_holding(pieces, t.range) == nullptr) return {};
    for (const auto& c : st.copies)
      for (const Range& r : {c.from, c.to})
        if (r.count > 0 && piece_holding(pieces, r) == nullptr) return {};
  }
  return pieces;
}

BufferLayout::Scratch& BufferLayout::thread_scratch(std::size_t i) {
  static thread_local std::array<Scratch, kMaxScratch> kept;
  return kept.at(i);
}

std::byte* BufferLayout::scratch(std::size_t bytes, bool zeroed) {
  if (scratch_used_ == kMaxScratch)
    throw Error(fmt::format("rank {}: internal: a layout of {} needs more than {} scratch buffers",
                            rank_, collectives::collective_name(call_.collective), kMaxScratch));
  auto& kept = thread_scratch(scratch_used_++);
  if (kept.bytes < bytes) {
    kept = Scratch{};  // the old one goes first, and a failed allocation leaves none
    kept.data.reset(new std::byte[bytes]);  // (not value-initialized: not zeroed)
    kept.bytes = bytes;
  }
  if (zeroed && bytes > 0) std::memset(kept.data.get(), 0, bytes);
  return kept.data.get();
}

Region& BufferLayout::add(Region r) {
  if (regions_used_ == kMaxRegions)
    throw Error(fmt::format("rank {}: internal: a layout of {} needs more than {} regions", rank_,
                            collectives::collective_name(call_.collective), kMaxRegions));
  return regions_[regions_used_++] = r;
}

void BufferLayout::fill_unwritten(std::span<const Range> unwritten, const Region& r) {
  const std::size_t es = dtype_size(call_.dtype);
  const Range whole{r.offset, r.count};
  for (const Range& u : unwritten) {
    if (u.offset >= r.offset + r.count) break;
    if (!overlap(u, whole)) continue;
    const std::size_t begin = std::max(u.offset, r.offset);
    const std::size_t end = std::min(u.offset + u.count, r.offset + r.count);
    std::memcpy(r.data + (begin - r.offset) * es, r.initial + (begin - r.offset) * es,
                (end - begin) * es);
  }
}

void BufferLayout::map_pieces(std::span<const InputPiece> pieces, Range input,
                              const std::byte* in, std::byte* out,
                              const std::vector<Range>* unwritten) {
  using Kind = InputPiece::Kind;
  const std::size_t es = dtype_size(call_.dtype);
  std::size_t copied = 0;
  for (const auto& p : pieces)
    if (p.kind == Kind::Scratch) copied += p.range.count;
  std::byte* copy = copied > 0 ? scratch(copied * es, false) : nullptr;
  auto& regions = thread_pieces();
  regions.clear();
  for (const auto& p : pieces) {
    const std::byte* from = in + (p.range.offset - input.offset) * es;
    const std::size_t bytes = p.range.count * es;
    std::byte* at = const_cast<std::byte*>(from);  // (Caller: only read)
    const std::byte* initial = nullptr;
    if (p.kind != Kind::Caller) {
      at = p.kind == Kind::Scratch ? copy : out;
      if (unwritten != nullptr)
        initial = from;  // filled by the ops that meet it, but for what none writes
      else
        std::memcpy(at, from, bytes);
    }
    if (p.kind == Kind::Scratch) {
      copy += bytes;
    } else if (p.kind == Kind::Output) {
      result_ = out;
      result_device_ = -1;
    }
    regions.push_back({p.range.offset, p.range.count, at, -1, initial});
    if (initial != nullptr) fill_unwritten(*unwritten, regions.back());
  }
  pieces_ = regions;
}

std::vector<Region>& BufferLayout::thread_pieces() {
  static thread_local std::vector<Region> kept;
  return kept;
}

BufferLayout::~BufferLayout() {
  for (std::size_t i = 0; i < scratch_used_; ++i)
    if (auto& kept = thread_scratch(i); kept.bytes > kKeptScratchBytes) kept = Scratch{};
}

Region BufferLayout::caller_region(Range range, std::byte* data, int device,
                                   device::Staging staging, bool output, const void* from,
                                   int from_device) {
  const std::size_t bytes = range.count * dtype_size(call_.dtype);
  if (device < 0 || staging != device::Staging::Whole || bytes == 0)
    return {range.offset, range.count, data, device};
  if (!whole_) whole_.emplace(*engine_);
  return {range.offset, range.count, whole_->stage(data, bytes, output, from, from_device), -1};
}

BufferLayout::BufferLayout(const Call& call, const Plan& plan_made,
                           const collectives::Shape& shape, std::size_t segment_bytes)
    : call_(call),
      rank_(shape.rank),
      world_(shape.world),
      engine_(call.staging.engine.get()),
      segment_bytes_(segment_bytes) {
  const Schedule& schedule = plan_made.schedule;
  const auto& plan = call.staging;
  const std::size_t es = dtype_size(call.dtype);
  const auto layout = collectives::layout(call.collective, shape);
  const auto ext =
      collectives::extents(call.collective, shape.world, call.count, shape.rank, call.root);
  auto* in = static_cast<std::byte*>(const_cast<void*>(call.input));
  auto* out = static_cast<std::byte*>(call.output);
  int in_dev = plan.input_device;
  const int out_dev = plan.output_device;
  const bool avg = call.op == ReduceOp::Avg;
  // A working copy of the input's range, in host memory.
  auto working_copy = [&] {
    std::byte* copy = scratch(layout.input.count * es, false);
    device::copy(engine_, copy, -1, in, in_dev, layout.input.count * es);
    return copy;
  };

  // Out of place on host memory, the ops that meet a working range's
  // initial contents read them in the input (executor/flow_graph.hpp):
  // no copy before the first step, but of what no op writes.
  const bool lazy = plan_made.flow.initial_exact && in_dev < 0 && out_dev < 0 &&
                    !(avg && call.dtype == DataType::Float16);
  if (layout.input == layout.output) {
    const Range all = layout.output;
    if (ext.output && lazy && in != out && !overlapping(in, all.count * es, out, all.count * es)) {
      auto& r = add({all.offset, all.count, out, -1, in});
      fill_unwritten(plan_made.flow.unwritten, r);
      result_ = out;
      result_device_ = -1;
    } else if (ext.output) {
      // An out-of-place call starts from its input in its output; one
      // staged whole gets it straight into its block (one copy fewer).
      const bool whole = out_dev >= 0 && plan.output == device::Staging::Whole;
      if (in != out && !whole) device::copy(engine_, out, out_dev, in, in_dev, all.count * es);
      const void* from = in != out ? static_cast<const void*>(in) : out;
      const int from_dev = in != out ? in_dev : out_dev;
      const auto& r = add(caller_region(all, out, out_dev, plan.output, true, from, from_dev));
      result_ = r.data;
      result_device_ = r.device;
    } else if (!ext.input) {  // a barrier's token
      add({all.offset, all.count, scratch(all.count * es), -1});  // zeroed
    } else if (writes(schedule) || (avg && call.dtype == DataType::Float16)) {
      // A partial result passes through this rank: not in the caller's input.
      add({all.offset, all.count, working_copy(), -1});
    } else {  // read only
      add(caller_region(all, in, in_dev, plan.input, false, in, in_dev));
    }
  } else if (inside(layout.output, layout.input) && !plan_made.input_pieces.empty() &&
             in_dev < 0 && out_dev < 0 && !(avg && call.dtype == DataType::Float16) &&
             !overlapping(in, layout.input.count * es, out, layout.output.count * es)) {
    map_pieces(plan_made.input_pieces, layout.input, in, out,
               lazy ? &plan_made.flow.unwritten : nullptr);
  } else if (inside(layout.output, layout.input)) {
    std::byte* copy = working_copy();
    add({layout.input.offset, layout.input.count, copy, -1});
    copy_out_ = copy + (layout.output.offset - layout.input.offset) * es;
    result_ = copy_out_;
  } else {
    const std::size_t in_bytes = layout.input.count * es, out_bytes = layout.output.count * es;
    // An input that is exactly this rank's block of the output (or the
    // output of the input) is where the schedule puts it; any other
    // overlap would be overwritten before it is read.
    const auto own_block = [&](const std::byte* block, std::size_t bytes, const std::byte* of) {
      return bytes * static_cast<std::size_t>(world_) == (block == in ? out_bytes : in_bytes) &&
             block == of + static_cast<std::size_t>(rank_) * bytes;
    };
    if (ext.input && ext.output && overlapping(in, in_bytes, out, out_bytes) &&
        !own_block(in, in_bytes, out) && !own_block(out, out_bytes, in)) {
      in = working_copy();
      in_dev = -1;
    }
    const auto side = [&](Range range, bool present, std::byte* data, int device,
                          device::Staging staging, bool output) {
      if (present) {
        add(caller_region(range, data, device, staging, output, data, device));
        return;
      }
      const auto hull = touched_within(schedule, range);
      if (hull.count > 0)
        add({hull.offset, hull.count, scratch(hull.count * es), -1});
    };
    const bool input_first = layout.input.offset < layout.output.offset;
    for (const bool input : {input_first, !input_first}) {
      if (input)
        side(layout.input, ext.input.has_value(), in, in_dev, plan.input, false);
      else
        side(layout.output, ext.output.has_value(), out, out_dev, plan.output, true);
    }
    // The schedule's own scratch past the layout (two_level all_to_all's:
    // every element is written before it is read).
    if (schedule.buffer_count > layout.buffer_count) {
      const std::size_t extra = schedule.buffer_count - layout.buffer_count;
      add({layout.buffer_count, extra, scratch(extra * es, false), -1});
    }
  }
  if (whole_) whole_->wait();
  if (avg && collectives::reduces(call.collective) && pieces_.empty()) {
    // float16's share of the average comes off before the sum (reduce.hpp),
    // in the one region of a reduction: always a working copy or the
    // output (a reduce's read-only input is never used for float16
    // averages, above, nor an input in pieces).
    const auto& r = regions_[0];
    if (r.device < 0) {
      prescale_average(call.dtype, r.data, r.count, world_);
    } else {
      device::transform(
          *engine_, r.data, r.count, es, segment_bytes_,
          [&](std::byte* block, std::size_t n) { prescale_average(call.dtype, block, n, world_); });
    }
  }
}

void BufferLayout::finish() {
  const std::size_t es = dtype_size(call_.dtype);
  const bool average = call_.op == ReduceOp::Avg && result_ != nullptr;
  if (copy_out_ != nullptr) {
    // The output is finished in the working copy, then copied out.
    if (call_.count == 0) return;
    if (average) finish_average(call_.dtype, copy_out_, call_.count, world_);
    device::copy(engine_, call_.output, call_.staging.output_device, copy_out_, -1,
                 call_.count * es);
    return;
  }
  if (average) {
    if (result_device_ < 0) {
      finish_average(call_.dtype, result_, call_.count, world_);
    } else {
      device::transform(
          *engine_, result_, call_.count, es, segment_bytes_,
          [&](std::byte* block, std::size_t n) { finish_average(call_.dtype, block, n, world_); });
    }
  }
  if (whole_) whole_->copy_back();
}

}  // namespace collie
