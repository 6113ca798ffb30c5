// collie_torch's elastic groups (elastic.cpp; collie_torch/elastic.py): a
// torch process group on a collie world of its own, made by collie::init()
// from the job's variables (or joined as a newcomer, COLLIE_JOIN=1), which
// shrink() and expand() replace between steps.
#pragma once

#include <pybind11/pybind11.h>

namespace collie_torch {

void add_elastic(pybind11::module_& m);

}  // namespace collie_torch
