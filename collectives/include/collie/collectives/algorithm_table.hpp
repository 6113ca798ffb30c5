// The algorithm table: every collective, every algorithm, and one row for
// each algorithm of each collective, from which every list, switch and
// predicate about algorithms is derived (algorithms.cpp's names, lists and
// make_schedule(), the cost model's closed forms and replays, Auto's
// two-level cases, explain's descriptions). Adding an algorithm is a name
// below, a row, its schedule file and its tests.
//
// A collective's rows are in the order its algorithms are listed and tried,
// its classic one first (what Auto keeps where nothing is priced).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <collie/collectives/pairwise.hpp>
#include <collie/collectives/recursive.hpp>
#include <collie/collectives/ring.hpp>
#include <collie/collectives/schedule.hpp>
#include <collie/collectives/tree.hpp>
#include <collie/collectives/two_level.hpp>

namespace collie::collectives {

enum class Collective : std::uint8_t {
  Broadcast,
  Reduce,
  AllReduce,
  Gather,
  AllGather,
  Scatter,
  ReduceScatter,
  AllToAll,
  Barrier
};

enum class Algorithm : std::uint8_t {
  Auto,  // the runtime chooses (see the runtime's cost model)
  Ring,
  Tree,
  RecursiveDoubling,
  HalvingDoubling,
  RecursiveHalving,
  Linear,
  Pairwise,
  Dissemination,
  TwoLevel  // within hosts, across them, within again (two_level.hpp)
};

// Every algorithm's name ("ring", ...), Auto first; parse_algorithm()
// accepts "-" for "_".
struct AlgorithmName {
  Algorithm algorithm;
  std::string_view name;
};
inline constexpr AlgorithmName kAlgorithmNames[] = {
    {Algorithm::Auto, "auto"},
    {Algorithm::Ring, "ring"},
    {Algorithm::Tree, "tree"},
    {Algorithm::RecursiveDoubling, "recursive_doubling"},
    {Algorithm::HalvingDoubling, "halving_doubling"},
    {Algorithm::RecursiveHalving, "recursive_halving"},
    {Algorithm::Linear, "linear"},
    {Algorithm::Pairwise, "pairwise"},
    {Algorithm::Dissemination, "dissemination"},
    {Algorithm::TwoLevel, "two_level"}};

// The cost model's closed form of a row (cost_formula.cpp), where it has one.
enum class ClosedForm : std::uint8_t {
  None,
  Ring,           // all_reduce, all_gather, reduce_scatter around the ring
  Chain,          // broadcast, reduce along the pipelined chain
  TwoLevel,       // all_reduce, all_gather, reduce_scatter: within, across, within
  TwoLevelChain,  // broadcast, reduce: a chain of chains
};

struct AlgorithmRow {
  Collective collective;
  Algorithm algorithm;
  // One line: what it does (collie explain prints it).
  std::string_view description;
  // Rank shape.rank's schedule.
  Schedule (*make)(const Shape&);
  // Made over the ranks in host order (algorithms.cpp's in_host_order()):
  // a subtree's ranks share a host where they can.
  bool host_order = false;
  // Its replay takes about n (n + pieces) steps (cost.hpp,
  // replays_quickly()): priced by its closed form past a size.
  bool replays_slowly = false;
  ClosedForm closed_form = ClosedForm::None;
  // Made for several hosts of several ranks: Auto leaves it out elsewhere
  // and lets it win a near tie (cost.cpp's auto_algorithm()).
  bool made_for_hosts = false;
};

inline constexpr AlgorithmRow kAlgorithmTable[] = {
    {Collective::Broadcast, Algorithm::Tree,
     "binomial tree from the root: ceil(log2 n) rounds of the whole buffer", tree_broadcast, true},
    {Collective::Broadcast, Algorithm::Ring,
     "pipelined chain from the root: the buffer in pieces, every link busy at once",
     chain_broadcast, false, true, ClosedForm::Chain},
    {Collective::Broadcast, Algorithm::TwoLevel,
     "a chain of chains: between the hosts' leaders, and along each host's ranks",
     two_level_broadcast, false, true, ClosedForm::TwoLevelChain, true},

    {Collective::Reduce, Algorithm::Tree,
     "binomial tree to the root: each rank sums its children's partial results", tree_reduce,
     true},
    {Collective::Reduce, Algorithm::Ring,
     "pipelined chain to the root: the buffer in pieces, summed hop by hop", chain_reduce, false,
     true, ClosedForm::Chain},
    {Collective::Reduce, Algorithm::TwoLevel,
     "a chain of chains: along each host's ranks into its leader, then host to host",
     two_level_reduce, false, true, ClosedForm::TwoLevelChain, true},

    {Collective::AllReduce, Algorithm::Ring,
     "reduce-scatter then all-gather around the ring: 2 (n - 1) steps, 2 (n - 1) / n of the "
     "buffer sent",
     ring_all_reduce, false, true, ClosedForm::Ring},
    {Collective::AllReduce, Algorithm::HalvingDoubling,
     "recursive halving reduce-scatter then recursive doubling all-gather: 2 log2 n rounds",
     halving_doubling_all_reduce},
    {Collective::AllReduce, Algorithm::RecursiveDoubling,
     "whole-buffer exchanges with partners 1, 2, 4, ... apart: log2 n rounds, for small buffers",
     recursive_doubling_all_reduce},
    {Collective::AllReduce, Algorithm::Tree,
     "binomial tree reduce to rank 0, then broadcast from it: every rank bit-identical",
     tree_all_reduce, true},
    {Collective::AllReduce, Algorithm::TwoLevel,
     "reduce-scatter within each host, a ring per stripe across hosts, all-gather within",
     two_level_all_reduce, false, true, ClosedForm::TwoLevel, true},

    {Collective::Gather, Algorithm::Tree,
     "binomial tree: subtrees' blocks flow up to the root, one message per round", tree_gather},
    {Collective::Gather, Algorithm::Linear, "every rank sends its block straight to the root",
     linear_gather},

    {Collective::AllGather, Algorithm::Ring,
     "each block passed around the ring: n - 1 steps, the bandwidth bound", ring_all_gather,
     false, true, ClosedForm::Ring},
    {Collective::AllGather, Algorithm::RecursiveDoubling,
     "exchanges with partners 1, 2, 4, ... apart, each twice the last: log2 n rounds",
     recursive_doubling_all_gather},
    {Collective::AllGather, Algorithm::TwoLevel,
     "each block once to each other host, then exchanged within each host",
     two_level_all_gather, false, true, ClosedForm::TwoLevel, true},

    {Collective::Scatter, Algorithm::Tree,
     "binomial tree: the root's blocks flow down the subtrees, one message per round",
     tree_scatter},
    {Collective::Scatter, Algorithm::Linear, "the root sends each rank its block straight",
     linear_scatter},

    {Collective::ReduceScatter, Algorithm::Ring,
     "blocks summed around the ring: n - 1 steps, the bandwidth bound", ring_reduce_scatter,
     false, true, ClosedForm::Ring},
    {Collective::ReduceScatter, Algorithm::RecursiveHalving,
     "exchange half of what is left with partners n/2, n/4, ... apart: log2 n rounds",
     recursive_halving_reduce_scatter},
    {Collective::ReduceScatter, Algorithm::TwoLevel,
     "partial sums made within each host, then sent once to their rank on each other host",
     two_level_reduce_scatter, false, true, ClosedForm::TwoLevel, true},

    {Collective::AllToAll, Algorithm::Pairwise,
     "in step k each rank sends to rank + k and receives from rank - k: n - 1 steps",
     pairwise_all_to_all, false, true},
    {Collective::AllToAll, Algorithm::TwoLevel,
     "blocks gathered per destination within each host, then one message per rank across hosts",
     two_level_all_to_all, false, true, ClosedForm::None, true},

    {Collective::Barrier, Algorithm::Dissemination,
     "in round k each rank signals rank + 2^k and waits for rank - 2^k: ceil(log2 n) rounds",
     dissemination_barrier},
};

// The row of c's algorithm a; nullptr where a does not implement c (Auto
// never does).
constexpr const AlgorithmRow* algorithm_row(Collective c, Algorithm a) {
  for (const auto& row : kAlgorithmTable)
    if (row.collective == c && row.algorithm == a) return &row;
  return nullptr;
}

}  // namespace collie::collectives
