// collie as a torch.distributed backend (torch 1.13's c10d API, and torch
// 2's): the Python module `collie_torch._collie_torch`, which
// collie_torch/__init__.py registers as backend "collie".
//
//   import collie_torch                       # registers "collie"
//   dist.init_process_group("collie", ...)    # every tutorial call runs on collie
//
// The parts: process_group_collie.hpp (the process group), works.hpp (how
// its calls complete), tensors.hpp (which tensors it takes), torch_store.hpp
// (torch's store as collie's), remote.hpp (master-worker mode: collie_torch.remote),
// etcd_binding.hpp (the store of the etcd:// init method), elastic.hpp (groups
// that shrink and expand between steps: collie_torch.ElasticGroup).
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <mutex>

#include <collie/version.hpp>

#include "elastic.hpp"
#include "etcd_binding.hpp"
#include "process_group_collie.hpp"
#include "remote.hpp"
#include "torch_store.hpp"

namespace collie_torch {

namespace {

#if TORCH_VERSION_MAJOR >= 2
// torch 2 asks for a backend per device a group serves, one after the other,
// each meeting in its own namespace of the group's store ("cpu/", then
// "cuda/"). One collie group serves both: the CUDA one is the CPU one just
// made for the same group. Nothing here keeps either alive (a weak
// intrusive_ptr would put off their destructors, and with them the end of
// the group and of rank 0's store, until the next group is made): the
// group's store is compared by address alone, and the backend clears its
// entry as it goes (forget_just_made).
struct JustMade {
  const c10d::Store* group_store = nullptr;
  int rank = -1;
  int size = 0;
  ProcessGroupCollie* backend = nullptr;
};
std::mutex just_made_mu;
JustMade just_made;
#endif

c10::intrusive_ptr<TorchBackend> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                        int size, std::chrono::milliseconds timeout,
                                        const std::string& profiling_name, int global_rank) {
#if TORCH_VERSION_MAJOR >= 2
  const auto [prefix, group_store] = outer_prefix(store);
  {
    const std::lock_guard lock(just_made_mu);
    if (prefix.rfind("cuda", 0) == 0 && group_store && just_made.backend != nullptr &&
        rank == just_made.rank && size == just_made.size &&
        just_made.group_store == group_store.get())
      return c10::intrusive_ptr<ProcessGroupCollie>::reclaim_copy(just_made.backend);
  }
  auto made = c10::make_intrusive<ProcessGroupCollie>(store, rank, size, timeout, profiling_name,
                                                      global_rank);
  const std::lock_guard lock(just_made_mu);
  just_made = JustMade{group_store.get(), rank, size, made.get()};
  return made;
#else
  return c10::make_intrusive<ProcessGroupCollie>(store, rank, size, timeout, profiling_name,
                                                global_rank);
#endif
}

// The address of a group's collie backend, 0 if its backend is another.
std::uintptr_t backend_address(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
#if TORCH_VERSION_MAJOR >= 2
  if (!pg->hasBackends()) return 0;
  try {
    return reinterpret_cast<std::uintptr_t>(
        dynamic_cast<ProcessGroupCollie*>(pg->getBackend(c10::DeviceType::CPU).get()));
  } catch (const std::exception&) {
    return 0;  // no CPU backend
  }
#else
  return reinterpret_cast<std::uintptr_t>(dynamic_cast<ProcessGroupCollie*>(pg.get()));
#endif
}

std::string describe(const c10::intrusive_ptr<c10d::ProcessGroup>& pg) {
#if TORCH_VERSION_MAJOR >= 2
  // torch 2's ProcessGroup holds a backend per device; collie's serves both.
  const auto backend = pg->getBackend(c10::DeviceType::CPU);
  auto* p = dynamic_cast<ProcessGroupCollie*>(backend.get());
#else
  auto* p = dynamic_cast<ProcessGroupCollie*>(pg.get());
#endif
  TORCH_CHECK(p != nullptr, "collie: not a collie process group (its backend is ",
              pg->getBackendName(), ")");
  return p->describe();
}

}  // namespace

#if TORCH_VERSION_MAJOR >= 2
void forget_just_made(const ProcessGroupCollie* backend) {
  const std::lock_guard lock(just_made_mu);
  if (just_made.backend == backend) just_made = JustMade{};
}
#endif

}  // namespace collie_torch

PYBIND11_MODULE(_collie_torch, m) {
  m.doc() = "collie's torch.distributed backend (import collie_torch to register it)";
  m.def("create_process_group", &collie_torch::create, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::arg("profiling_name") = "collie", pybind11::arg("global_rank") = -1,
        pybind11::call_guard<pybind11::gil_scoped_release>(),
        "A collie process group of `size` ranks meeting in torch's `store` (the creator "
        "torch.distributed.Backend.register_backend calls); `profiling_name` leads its calls' "
        "titles in torch's profiler (\"collie:all_reduce\"); `global_rank`, this process's rank in "
        "the default group when this is a sub-group, makes its errors give both numbers of each "
        "rank.");
  m.def("describe_transport", &collie_torch::describe, pybind11::arg("group"),
        "What carries a collie group's messages (\"tcp on 127.0.0.1:41234\", \"shm ...\").");
  m.def("backend_address", &collie_torch::backend_address, pybind11::arg("group"),
        "The address of a group's collie backend (as its monitored_barrier method gives it), 0 "
        "for a group of another backend.");
  m.attr("__version__") = collie::version();
  collie_torch::add_remote(m);
  collie_torch::add_etcd(m);
  collie_torch::add_elastic(m);
}
