// collie as a torch.distributed backend (torch 1.13's c10d API): the Python
// module `collie_torch._collie_torch`, which collie_torch/__init__.py
// registers as backend "collie".
//
//   import collie_torch                       # registers "collie"
//   dist.init_process_group("collie", ...)    # every tutorial call runs on collie
//
// The parts: process_group_collie.hpp (the process group), works.hpp (how
// its calls complete), tensors.hpp (which tensors it takes), torch_store.hpp
// (torch's store as collie's).
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <collie/version.hpp>

#include "process_group_collie.hpp"

namespace collie_torch {

namespace {

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int size,
                                              std::chrono::milliseconds timeout) {
  return c10::make_intrusive<ProcessGroupCollie>(store, rank, size, timeout);
}

std::string describe(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
  auto* p = dynamic_cast<ProcessGroupCollie*>(pg.get());
  TORCH_CHECK(p != nullptr, "collie: not a collie process group (its backend is ",
              pg->getBackendName(), ")");
  return p->describe();
}

}  // namespace

}  // namespace collie_torch

PYBIND11_MODULE(_collie_torch, m) {
  m.doc() = "collie's torch.distributed backend (import collie_torch to register it)";
  m.def("create_process_group", &collie_torch::create, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "A collie process group of `size` ranks meeting in torch's `store` (the creator "
        "torch.distributed.Backend.register_backend calls).");
  m.def("describe_transport", &collie_torch::describe, pybind11::arg("group"),
        "What carries a collie group's messages (\"tcp on 127.0.0.1:41234\", \"shm ...\").");
  m.attr("__version__") = collie::version();
}
