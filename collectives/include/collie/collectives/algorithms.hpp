// Every collective and the algorithms that implement it, by name: derived
// from the algorithm table (algorithm_table.hpp), where each collective's
// algorithms are listed with a line on what each does.
//
// Working-buffer layouts (elements; n ranks, `count` as the caller gives it):
//   all_reduce, broadcast, reduce   [buffer: count]
//   reduce_scatter                  [every rank's input: n blocks of count];
//                                   rank r's result is block r
//   all_gather, gather              [output: n blocks | input: count]
//   scatter                         [input: n blocks | output: count]
//   all_to_all                      [input: n blocks | output: n blocks]
//   barrier                         [one token]
// layout() says where input and output sit; the runtime maps the rest of
// the working buffer, where a rank touches it, to scratch memory.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <collie/collectives/algorithm_table.hpp>
#include <collie/collectives/schedule.hpp>

namespace collie::collectives {

inline constexpr Collective kCollectives[] = {
    Collective::Broadcast,     Collective::Reduce,    Collective::AllReduce,
    Collective::Gather,        Collective::AllGather, Collective::Scatter,
    Collective::ReduceScatter, Collective::AllToAll,  Collective::Barrier};

// Every algorithm, Auto first (the table's names, in their order).
inline constexpr auto kAlgorithms = [] {
  std::array<Algorithm, std::size(kAlgorithmNames)> all{};
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = kAlgorithmNames[i].algorithm;
  return all;
}();

// "all_reduce", ...; parse accepts "allreduce" and "all-reduce" too.
std::string_view collective_name(Collective c);
std::optional<Collective> parse_collective(std::string_view name);
// "ring", "tree", "recursive_doubling", ...; parse accepts "-" for "_".
std::string_view algorithm_name(Algorithm a);
std::optional<Algorithm> parse_algorithm(std::string_view name);

// The algorithms implementing `c` (never Auto), the classic one first: its
// rows of the table, in order.
const std::vector<Algorithm>& algorithms_for(Collective c);
// Whether `a` is one of algorithms_for(c).
bool implements(Collective c, Algorithm a);
// "ring, halving_doubling, recursive_doubling, tree", for error messages.
std::string algorithm_list(Collective c);
// The one wording of an unknown algorithm, wherever one is named (the API,
// COLLIE_ALGO, the CLI): "all_reduce has no algorithm 'x'; it has: ring,
// ..." ("it has: auto, ring, ..." where auto may be named too).
std::string no_algorithm_message(Collective c, std::string_view name, bool auto_too);
bool has_root(Collective c);
bool reduces(Collective c);  // takes a reduce op
// Acts element by element alike on every rank: input and output are the
// same range of count elements (all_reduce, broadcast, reduce), so a call
// may be cut into calls on consecutive pieces.
bool elementwise(Collective c);

// Rank `shape.rank`'s schedule. Throws collie::Error for an algorithm that
// does not implement `c` (listing those that do), a world below 1, a rank or
// root out of range.
Schedule make_schedule(Collective c, Algorithm a, const Shape& shape);

// Where the caller's input and output sit in the working buffer.
struct Layout {
  Range input;
  Range output;
  std::size_t buffer_count = 0;
};
Layout layout(Collective c, const Shape& shape);

// What one rank's call reads from its input and writes to its output, in
// elements, `count` being the collective's count per rank (the layouts
// above): every place that sizes, checks or stages a caller's buffers asks
// this. A side is nullopt where this rank ignores that buffer: a reduce's
// and a gather's output and a scatter's input off the root, and both of a
// barrier's.
struct Extents {
  std::optional<std::size_t> input;
  std::optional<std::size_t> output;
};
Extents extents(Collective c, int world, std::size_t count, int rank, int root);

// The count per rank of a call given buffers of `input` and `output`
// elements on `rank`, checked against extents(): throws collie::Error
// saying what the buffers must hold ("all_gather: a buffer of 7 elements
// for 2 ranks of 10: it must hold 2 x 10 = 20"). The sides a rank ignores
// are not checked. A barrier's count is 1.
std::size_t count_of_buffers(Collective c, int world, std::size_t input, std::size_t output,
                             int rank, int root);

// ---- for tests and `collie explain` ----

// What every rank holds before the collective, symbolically: rank r's input
// element holds {r} (all_to_all: block j of rank r holds {r * n + j}; a
// scatter's root block j holds {j}); everything else is empty.
SymbolicBuffers initial_state(Collective c, int world, std::size_t count, int root);
// Throws collie::Error naming the first rank and element whose final
// contents are wrong: a reduction must hold every rank exactly once, a copy
// exactly its source; a barrier's token must have heard from every rank.
void check_final_state(Collective c, int world, std::size_t count, int root,
                       const SymbolicBuffers& state);

}  // namespace collie::collectives
