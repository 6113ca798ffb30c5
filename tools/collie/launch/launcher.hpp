// The launcher of `collie launch` on one node: the job's secret and store,
// this node's place among the nodes, and the attempts. The launcher on the
// node that hosts the store (node 0) serves it; each starts its ranks with
// torchrun's environment (launch/rank_environment.hpp) and watches them
// (launch/ranks.hpp); when one fails it stops the others, says which rank
// the others blame (launch/blame.hpp; else which failed first) and what it
// raised (its error file, launch/rank_error_file.hpp), and restarts the whole group
// up to --max-restarts times. With several nodes, the launchers tell each
// other about failures, restarts and completion through the store
// (launch/nodes.hpp).
#pragma once

#include "args.hpp"

namespace collie::cli {

// Runs the job `args` describes (resolved by resolve_torchrun); returns the
// launcher's exit code. Throws collie::Error for what it cannot start.
int run_launcher(const LaunchArgs& args);

}  // namespace collie::cli
