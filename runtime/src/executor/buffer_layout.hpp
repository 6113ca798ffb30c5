// How one call's buffers become the working buffer its schedule addresses.
//
// A schedule speaks of one working buffer per rank, laid out per collective
// (collectives::layout(): where the input and the output sit in it), of
// which this rank reads and writes what collectives::extents() says. Here
// those ranges are mapped to memory, by the shape of the layout alone:
//
//   the input and the output are one range (all_reduce, broadcast, reduce):
//     the caller's output, the input copied there first if out of place
//     (but see "Nothing copied first" below); a
//     rank without an output (a reduce off the root) reads its input in
//     place, or a working copy when a partial result passes through it (or
//     a float16 average's share must come off first);
//   the output lies inside the input (reduce_scatter): the algorithms
//     reduce in a copy of the input. Where the plan has the input in
//     pieces (input_pieces() below: every range the schedule touches lies
//     in one), only the pieces it writes are copied to scratch memory, the
//     output's range is the caller's output (filled from the input), and
//     the rest is read in the caller's input: on 4 hosts x 2 ranks,
//     two_level copies 3/8 of the input instead of all of it, and nothing
//     out at the end. Otherwise (device memory, a float16 average, input
//     and output overlapping, a schedule such as recursive halving whose
//     ranges span pieces) the whole input is copied and finish() copies
//     the output's range out of it;
//   apart (all_gather, gather, scatter, all_to_all): each range is the
//     caller's buffer, or scratch memory for the part this rank touches of
//     a side it has none of (a gather's intermediate rank of a tree); an
//     input that overlaps the output is copied first, unless it is exactly
//     this rank's block of it (an in-place all_gather); a schedule's
//     buffer past the layout (two_level all_to_all's gathered blocks) is
//     scratch memory;
//   neither (a barrier): one scratch element.
//
// Nothing copied first: out of place on host memory, where every op's
// range is wholly written before it or wholly not (the plan's graph:
// executor/flow_graph.hpp, initial_exact), the output and the working
// pieces are not filled before the first step. Their regions say where the
// initial contents are (Region::initial, the caller's input); the ops that
// meet them read them there, a receive that reduces writing input plus
// message (so the first sends leave at once, and the copy is made piece by
// piece as data arrives, in cache), and only the ranges no op writes are
// copied here. Not for a float16 average (its share comes off the input
// first) nor device memory.
//
// After the schedule, finish() completes averages and copies out what is
// owed.
//
// Scratch memory (working copies, a side a rank has no buffer for) comes
// from buffers the thread keeps between its calls (a thread runs one call
// at a time), up to 64 MiB each: a repeated call allocates nothing.
//
// Device memory: the call's staging plan (device/staging.hpp) said how
// each of the caller's buffers is staged. A buffer to stage Whole is
// copied to a pinned block here (device/whole_staging.hpp) and its region
// points there; one staged by Segments keeps its device region, which the
// executor stages step by step. Copies made here (an out-of-place call's
// input to its output, the working copies) go through the plan's engine
// where a side is on a device; working copies are host memory. An
// average's division on a device region runs on the host, through the
// engine, segment by segment.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <collie/collectives/schedule.hpp>

#include "group/call.hpp"
#include "device/whole_staging.hpp"
#include "executor/executor.hpp"
#include "plan/plan_cache.hpp"

namespace collie {

// The input of `collective` in pieces for `schedule` of `shape` (see
// Plan::input_pieces): none unless the output lies inside the input and
// every range the schedule sends, receives or copies lies in one piece.
std::vector<InputPiece> input_pieces(const collectives::Schedule& schedule,
                                     collectives::Collective collective,
                                     const collectives::Shape& shape);

class BufferLayout {
 public:
  // Maps `call`'s buffers for `plan`'s schedule of `shape` (this rank's);
  // copies inputs where the schedule needs a working copy, stages the
  // buffers the plan stages whole, and takes a float16 average's share off
  // before the sum (reduce.hpp). `segment_bytes`: the piece an average on a
  // device is divided in.
  BufferLayout(const Call& call, const Plan& plan, const collectives::Shape& shape,
               std::size_t segment_bytes);
  // Gives back scratch memory too large to keep.
  ~BufferLayout();
  BufferLayout(const BufferLayout&) = delete;
  BufferLayout& operator=(const BufferLayout&) = delete;

  // The working buffer, for the executor.
  std::span<const Region> regions() const {
    if (!pieces_.empty()) return pieces_;
    return {regions_.data(), regions_used_};
  }

  // After the schedule: the output's range out of the working copy,
  // averages divided, staged outputs copied back.
  void finish();

 private:
  // `bytes` of scratch memory for the call, zeroed unless the caller
  // fills it at once.
  std::byte* scratch(std::size_t bytes, bool zeroed = true);
  Region& add(Region r);
  // Maps the input in `pieces` (reduce_scatter's, host memory only).
  // Its working pieces are filled by the ops that meet them where
  // `unwritten` is given (what no op writes: copied here), else copied now.
  void map_pieces(std::span<const InputPiece> pieces, collectives::Range input,
                  const std::byte* in, std::byte* out,
                  const std::vector<collectives::Range>* unwritten);
  // Copies the parts of `r` in `unwritten` from its initial contents.
  void fill_unwritten(std::span<const collectives::Range> unwritten, const Region& r);
  // The thread's kept scratch buffer `i` (of kMaxScratch): memory as the
  // allocator gave it (never zeroed unless asked: a working copy is
  // written whole at once).
  struct Scratch {
    std::unique_ptr<std::byte[]> data;
    std::size_t bytes = 0;
  };
  static Scratch& thread_scratch(std::size_t i);
  // A region of the caller's buffer `data` (on `device`), staged whole
  // where the plan says so (filled from `from` on `from_device`).
  Region caller_region(collectives::Range range, std::byte* data, int device,
                       device::Staging staging, bool output, const void* from, int from_device);

  const Call& call_;
  int rank_;
  int world_;
  device::Engine* engine_;
  std::size_t segment_bytes_;
  // The most any layout needs of each (a working copy, a side, and a
  // schedule's scratch past the layout).
  static constexpr std::size_t kMaxScratch = 3, kMaxRegions = 3;
  std::size_t scratch_used_ = 0;
  std::array<Region, kMaxRegions> regions_{};
  std::size_t regions_used_ = 0;
  // An input in pieces: its regions, in order, in the thread's kept list
  // (thread_pieces(): cleared and refilled, so a repeated call allocates
  // nothing).
  std::span<const Region> pieces_;
  static std::vector<Region>& thread_pieces();
  std::byte* result_ = nullptr;  // where an average is finished
  int result_device_ = -1;
  std::byte* copy_out_ = nullptr;  // the output's range in a working copy
  std::optional<device::WholeStaging> whole_;
};

}  // namespace collie
