// The symbolic run behind `collie explain`: every rank's real schedule
// (make_schedule), executed step by step on buffers of symbols instead of
// numbers, in synchronous steps a learner can follow.
//
// Symbols: element i of rank r's input is "r:i" (shown as a letter for the
// rank and the index: rank 0's element 2 is a2); an element holds the
// symbols combined into it (a2+c2+d2 after a reduction). Buffers are kept as
// runs of elements whose symbols differ only by their index, so a run of a
// million elements costs what one costs, and any count can be explained.
//
// Steps (as the explanation numbers them, not a rank's own steps): in each,
// every rank that has not finished first posts the sends of its next
// schedule step (after that step's local copies), then every rank whose
// receives have all been sent completes its step. A message crosses in the
// step it is sent unless its receiver is still busy with an earlier step.
// On a world of n ranks, the ring all_reduce takes 2 (n - 1) such steps.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <collie/collectives/algorithms.hpp>

namespace collie::collectives {

// Element `index` of rank `rank`'s input (for an all_to_all and a scatter,
// the index within the whole input, every block).
struct Symbol {
  int rank = 0;
  std::size_t index = 0;
  friend auto operator<=>(const Symbol&, const Symbol&) = default;
};

// Elements [offset, offset + count) of a buffer; element offset + i holds
// every symbol of `symbols` with its index advanced by i (sorted; empty
// where nothing has arrived).
struct Run {
  std::size_t offset = 0;
  std::size_t count = 0;
  std::vector<Symbol> symbols;
  friend bool operator==(const Run&, const Run&) = default;
};
using RunBuffer = std::vector<Run>;  // contiguous runs covering the buffer

// A message, as it crossed: sent by `from` in its schedule step `from_step`
// (range `from_range` of its buffer), received by `to` in its step
// `to_step` into `to_range`, copied or reduced; what it carried.
struct Message {
  int from = 0;
  int to = 0;
  std::size_t from_step = 0;
  std::size_t to_step = 0;
  Range from_range;
  Range to_range;
  Combine combine = Combine::Copy;
  std::size_t sent_in = 0;  // the explanation's step it was sent in (1-based)
  std::vector<Run> content;  // offsets relative to the range
};

struct Copy {
  int rank = 0;
  std::size_t step = 0;  // the rank's schedule step
  LocalCopy copy;
};

// One explanation step: what crossed, and every rank's buffer after it.
struct ExplainedStep {
  std::size_t number = 0;  // 1-based
  std::vector<Copy> copies;
  std::vector<Message> messages;  // received in this step, by receiver
  std::size_t sent = 0;           // messages posted in this step
  std::vector<RunBuffer> state;   // [rank]
};

struct Explanation {
  Collective collective = Collective::AllReduce;
  Algorithm algorithm = Algorithm::Ring;
  Shape shape;                      // rank unused
  std::vector<Schedule> schedules;  // [rank]
  std::vector<RunBuffer> initial;   // [rank]
  std::vector<RunBuffer> final_state;
  std::size_t steps = 0;
};

// Builds every rank's schedule and the initial state and runs them; each
// step is passed to `on_step` as it completes (the states of all steps of a
// big world need not fit in memory at once). Throws collie::Error as
// make_schedule() and validate() do.
Explanation explain(Collective c, Algorithm a, const Shape& shape,
                    const std::function<void(const ExplainedStep&)>& on_step);

// The initial state: every rank's input (the root's alone for a broadcast
// and a scatter) holds its own symbols; the rest of the buffer is empty.
std::vector<RunBuffer> initial_runs(Collective c, const Shape& shape);

// The runs of `buffer` within `range`, offsets relative to its start.
std::vector<Run> runs_in(const RunBuffer& buffer, Range range);

// The same contents as simulate() would hold (algorithms.hpp's encoding of
// contributions), for check_final_state().
SymbolicBuffers contributions(Collective c, const Shape& shape, const std::vector<RunBuffer>& state);

// Throws collie::Error naming the first wrong element unless every output
// element holds exactly the symbols it must: a reduction's element i every
// rank's element i once, a copy its one source element; a barrier's token
// must have heard from every rank. Checks runs, not
// elements (any count costs the same); stricter than check_final_state(),
// which sees whose contributions arrived but not which elements.
void check_final_symbols(Collective c, const Shape& shape, const std::vector<RunBuffer>& state);

// "a", ..., "z", then "r26", "r27", ...: the letter of a rank.
std::string rank_letter(int rank);
// "a2", "a[0..3]" (a run of four), "a2+b2+c2", "r26:2" (rank 26), "" for an
// empty run; a barrier's symbols have no index ("a+b+c").
std::string run_label(const Run& run, bool with_index = true);

}  // namespace collie::collectives
