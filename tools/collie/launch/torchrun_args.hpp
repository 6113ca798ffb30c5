// torchrun's command line, as `collie launch` takes it: torchrun's flags as
// torchrun spells them (underscores or dashes), their PET_ variables (as
// Kubeflow's PyTorchJob sets them), a program after the options with no
// "--" before it, and a Python script or module run with a Python that
// imports torch. Two steps: the words are put into collie's spelling before
// CLI11 reads them (normalize_launch_words), then torchrun's values are
// turned into the launcher's (resolve_torchrun).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "args.hpp"

namespace collie::cli {

// Rewrites the words after `collie launch` (`words[0]` == "launch"; any
// other command is left alone) into collie's spelling: --nproc_per_node=2 as
// --nproc-per-node=2, -t/--tee with or without its spec, PET_<FLAG>
// variables as the flags they stand for where the command line does not
// give them, and "--" before a program that follows the options without it
// (so that its own options stay its own). `launch` is the subcommand, whose
// options say which take a value.
void normalize_launch_words(std::vector<std::string>& words, CLI::App& launch);

// Checks torchrun's values and resolves them for the launcher: the number
// of ranks (auto, cpu, gpu), nodes, the rendezvous (static or c10d, its
// endpoint and conf), the output specs, and the program (a .py script or
// -m module runs with a Python that imports torch). Throws collie::Error
// naming a flag or value that collie cannot honour.
void resolve_torchrun(LaunchArgs& args);

// "=eth0": the COLLIE_SOCKET_IFNAME that picks the interface holding
// `address` ("" if none here has it).
std::string interface_with(const std::string& address);

// The Python that runs a script: $PYTHON_EXEC, else the first of python3 on
// PATH and /usr/bin/python3 that has torch, else python3.
std::string python_for_torch();

}  // namespace collie::cli
