// What a `collie bench <collective>` run sweeps, resolved from its options
// once, before any rank starts (every error names the option): the dtype
// and op, each collective's algorithms, and each collective's sizes.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include <collie/process_group.hpp>

#include "collective.hpp"

namespace collie::cli {

struct Plan {
  DataType dtype{};
  ReduceOp op{};
  std::vector<std::pair<Collective, std::vector<Algorithm>>> runs;
};

// The options read into a plan; throws collie::Error naming the option.
Plan make_plan(const Args& a);

// The sizes of the sweep for `c`, in bytes, each a whole number of elements
// (of blocks of n elements for the blocked collectives), at least one, with
// no size twice.
std::vector<std::size_t> sizes_for(const Args& a, Collective c, std::size_t esize, int n);

// The width of the algo column: the longest name it can show.
std::size_t algo_column_width(const Plan& plan);

}  // namespace collie::cli
