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

BufferLayout::BufferLayout(const Call& call, const Schedule& schedule, int rank, int world)
    : call_(call), rank_(rank), world_(world) {
  const std::size_t es = dtype_size(call.dtype);
  const auto bytes = call.count * es;
  const auto nc = static_cast<std::size_t>(world) * call.count;
  auto* in = static_cast<std::byte*>(const_cast<void*>(call.input));
  auto* out = static_cast<std::byte*>(call.output);
  const bool root = rank == call.root;
  const bool avg = call.op == ReduceOp::Avg;

  switch (call.collective) {
    case Collective::AllReduce:
    case Collective::Broadcast:
      if (in != out && bytes > 0) std::memcpy(out, in, bytes);
      regions_.push_back({0, call.count, out});
      result_ = out;
      break;
    case Collective::Reduce:
      if (root) {
        if (in != out && bytes > 0) std::memcpy(out, in, bytes);
        regions_.push_back({0, call.count, out});
        result_ = out;
      } else if (writes(schedule) || (avg && call.dtype == DataType::Float16)) {
        // A partial result passes through this rank: not in the caller's input.
        scratch_.assign(in, in + bytes);
        regions_.push_back({0, call.count, scratch_.data()});
      } else {
        regions_.push_back({0, call.count, in});  // read only
      }
      break;
    case Collective::ReduceScatter:
      // The algorithms reduce in a buffer of every block: a copy of the input.
      scratch_.assign(in, in + nc * es);
      regions_.push_back({0, nc, scratch_.data()});
      result_ = out;
      break;
    case Collective::AllGather:
      regions_.push_back({0, nc, out});
      regions_.push_back({nc, call.count, in});
      break;
    case Collective::Gather:
    case Collective::Scatter: {
      const bool gather = call.collective == Collective::Gather;
      std::byte* own = gather ? in : out;  // this rank's block, outside the n blocks
      if (root) {
        regions_.push_back({0, nc, gather ? out : in});
      } else {
        const auto hull = touched_below(schedule, nc);
        scratch_.resize(hull.count * es);
        if (hull.count > 0) regions_.push_back({hull.offset, hull.count, scratch_.data()});
      }
      regions_.push_back({nc, call.count, own});
      break;
    }
    case Collective::AllToAll:
      if (overlapping(in, nc * es, out, nc * es)) {
        scratch_.assign(in, in + nc * es);
        in = scratch_.data();
      }
      regions_.push_back({0, nc, in});
      regions_.push_back({nc, nc, out});
      break;
    case Collective::Barrier:
      regions_.push_back({0, 1, &token_});
      break;
  }
  if (avg && collectives::reduces(call.collective)) {
    // float16's share of the average comes off before the sum (reduce.hpp),
    // in the one region of a reduction: always the working copy (a reduce's
    // read-only input is never used for float16 averages, above).
    prescale_average(call.dtype, regions_.front().data, regions_.front().count, world);
  }
}

void BufferLayout::finish() {
  const std::size_t es = dtype_size(call_.dtype);
  if (call_.collective == Collective::ReduceScatter && call_.count > 0)
    std::memcpy(call_.output, scratch_.data() + static_cast<std::size_t>(rank_) * call_.count * es,
                call_.count * es);
  if (call_.op == ReduceOp::Avg && result_ != nullptr &&
      (call_.collective != Collective::Reduce || rank_ == call_.root))
    finish_average(call_.dtype, result_, call_.count, world_);
}

}  // namespace collie
