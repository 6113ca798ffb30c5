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
// - A step first makes its local copies (in order), then sends; sends read
//   the buffer as it was after the copies, even where a receive of the same
//   step lands on the same range (recursive doubling exchanges whole
//   buffers: the runtime then sends from a snapshot; elsewhere it sends
//   straight from the caller's memory). No two receives of a step overlap.
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

// Elements copied within the rank's own buffer (say, its input block into
// its slot of the output).
struct LocalCopy {
  Range from;
  Range to;
};

struct Step {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  std::vector<LocalCopy> copies;  // made before the sends
};

struct Schedule {
  std::size_t buffer_count = 0;  // elements in this rank's working buffer
  std::vector<Step> steps;
};

// What a schedule is made for: this rank, the world size, the element count
// (per rank, as the collective's caller counts it: see algorithms.hpp), the
// root of rooted collectives, and the number of pipeline pieces for the
// chain algorithms (the runtime derives it from the segment size).
struct Shape {
  int rank = 0;
  int world = 1;
  std::size_t count = 0;
  int root = 0;
  int pieces = 1;
};

// Helpers for writing schedules: steps with nothing in them, and transfers
// of empty ranges, are left out (on both sides alike, since both sides
// compute the same ranges).
void add_send(Step& step, int peer, Range range);
void add_recv(Step& step, int peer, Range range, Combine combine);
void add_copy(Step& step, Range from, Range to);
void push_step(Schedule& s, Step step);
// ((i % n) + n) % n
int wrap(int i, int n);

// Whether a step's receive lands on a range one of its sends reads.
bool receives_overlap_sends(const Step& step);
bool overlap(const Range& a, const Range& b);

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
// buffers, matching messages between ranks in order. Throws collie::Error
// with a description on a deadlock, a size mismatch, a range outside the
// buffer, overlapping receives within a step, or messages left unreceived.
SymbolicBuffers simulate(const std::vector<Schedule>& schedules, SymbolicBuffers initial);

// The state every rank starts an all_reduce-like collective with: element
// i of rank r holds {r}.
SymbolicBuffers own_contributions(int world, std::size_t count);

}  // namespace collie::collectives
