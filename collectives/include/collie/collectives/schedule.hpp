// Schedules: an algorithm, written once, for two readers.
//
// A Schedule is what one rank does in one collective: an ordered list of
// steps; in each step it sends some ranges of its buffer to some peers and
// receives some ranges from others, combining what arrives into the buffer
// by copy or by reduction. Schedules are pure functions of (rank, world
// size, element count, root): the runtime executes them over the transport,
// and `collie explain` runs them symbolically (simulate() below) to show
// which contributions each rank holds after each step.
//
// Rules every schedule keeps (simulate() checks them):
// - Between two ranks, the k-th send of one matches the k-th receive of the
//   other, and they name the same number of elements.
// - Within a step, sends read the buffer as it was when the step began; no
//   receive range overlaps a send range or another receive range of the same
//   step (so sends can go out of the caller's buffer with no copy while
//   receives land in it).
// - Empty ranges are left out on both sides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace collie::collectives {

// Elements [offset, offset + count) of a rank's buffer.
struct Range {
  std::size_t offset = 0;
  std::size_t count = 0;
  friend bool operator==(const Range&, const Range&) = default;
};

enum class Combine : std::uint8_t {
  Copy,    // the received elements replace the range
  Reduce,  // range = op(range, received)
};

struct Transfer {
  int peer = 0;
  Range range;
  Combine combine = Combine::Copy;  // receives only
};

struct Step {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
};

struct Schedule {
  std::size_t buffer_count = 0;  // elements in this rank's working buffer
  std::vector<Step> steps;
};

// Chunk i of `count` elements cut into `parts` nearly equal, contiguous
// chunks (the first count % parts chunks one element longer).
Range chunk(std::size_t count, int parts, int i);

// ---- symbolic execution ----

// What one element holds: the ranks whose contributions were combined into
// it, with repetition, sorted (a reduction that counts a rank twice shows).
using Contribution = std::vector<int>;
// [rank][element]
using SymbolicBuffers = std::vector<std::vector<Contribution>>;

// Runs every rank's schedule (schedules[r] is rank r's) on symbolic
// buffers, matching messages between ranks in order. Calls `after_step`
// (if given) each time a rank completes a step. Throws collie::Error with
// a description on a deadlock, a size mismatch, a range outside the buffer,
// a hazard within a step, or messages left unreceived.
SymbolicBuffers simulate(const std::vector<Schedule>& schedules, SymbolicBuffers initial);

// The state every rank starts an all_reduce-like collective with: element
// i of rank r holds {r}.
SymbolicBuffers own_contributions(int world, std::size_t count);

}  // namespace collie::collectives
