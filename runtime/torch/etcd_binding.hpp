// collie's etcd store for Python: collie_torch._collie_torch.EtcdStore, the
// store under collie_torch's etcd:// init method (collie_torch/etcd.py).
#pragma once

#include <torch/csrc/utils/pybind.h>

namespace collie_torch {

void add_etcd(pybind11::module& m);

}  // namespace collie_torch
