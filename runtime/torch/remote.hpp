// Master-worker mode's bindings for Python (remote.cpp): the functions
// collie_torch/remote.py builds remote tensors on.
#pragma once

#include <pybind11/pybind11.h>

namespace collie_torch {

void add_remote(pybind11::module_& m);

}  // namespace collie_torch
