// The bindings collie_torch/elastic.py builds ElasticGroup on (elastic.hpp):
// make a group, shrink it, expand it, hand named tensors to newcomers. Each
// returns a torch process group (a ProcessGroupCollie, process_group_collie.hpp)
// usable as any torch group: dist.all_reduce(t, group=g), DDP's
// process_group. Every call waits without holding the GIL.
#include "elastic.hpp"

#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <collie/process_group.hpp>

#include "process_group_collie.hpp"
#include "tensors.hpp"

namespace collie_torch {

namespace {

namespace py = pybind11;

using TorchGroup = c10::intrusive_ptr<c10d::ProcessGroup>;

#if TORCH_VERSION_MAJOR >= 2
// torch 2 wraps each backend in a ProcessGroup, which init_process_group and
// new_group make; an elastic group's is made here: one collie backend for
// CPU and CUDA tensors, named "collie" (torch names the ProcessGroup of
// every plugin backend "custom", and DDP's logging reads the name).
class ElasticTorchGroup final : public c10d::ProcessGroup {
 public:
  explicit ElasticTorchGroup(const c10::intrusive_ptr<ProcessGroupCollie>& backend)
      : c10d::ProcessGroup(backend->getRank(), backend->getSize()) {
    for (const auto device : {c10::DeviceType::CPU, c10::DeviceType::CUDA})
      setBackend(device, BackendType::CUSTOM, backend);
    setDefaultBackend(BackendType::CUSTOM);
  }
  const std::string getBackendName() const override { return "collie"; }
};

TorchGroup wrap(collie::ProcessGroup group) {
  return c10::make_intrusive<ElasticTorchGroup>(
      c10::make_intrusive<ProcessGroupCollie>(std::move(group)));
}

ProcessGroupCollie& backend_of(const TorchGroup& g) {
  const auto backend = g->getBackend(c10::DeviceType::CPU);
  auto* p = dynamic_cast<ProcessGroupCollie*>(backend.get());
  TORCH_CHECK(p != nullptr, "collie_torch: not a collie process group (its backend is ",
              g->getBackendName(), ")");
  return *p;  // held by g
}
#else
TorchGroup wrap(collie::ProcessGroup group) {
  return c10::make_intrusive<ProcessGroupCollie>(std::move(group));
}

ProcessGroupCollie& backend_of(const TorchGroup& g) {
  auto* p = dynamic_cast<ProcessGroupCollie*>(g.get());
  TORCH_CHECK(p != nullptr, "collie_torch: not a collie process group (its backend is ",
              g->getBackendName(), ")");
  return *p;
}
#endif

TorchGroup elastic_init(std::optional<std::chrono::milliseconds> timeout) {
  collie::InitOptions o;
  if (timeout) o.timeout = *timeout;
  return wrap(collie::init(o));
}

// The same torch group where the collie group is the same (an expand with
// no newcomer returns the group it was called on; one that admits any is
// larger): the caller's calls and works stay with it.
TorchGroup renewed(const TorchGroup& g, collie::ProcessGroup next) {
  if (next.size() == backend_of(g).group().size()) return g;
  return wrap(std::move(next));
}

TorchGroup shrink(const TorchGroup& g, std::optional<std::chrono::milliseconds> timeout) {
  auto group = backend_of(g).group();
  return wrap(group.shrink(timeout));
}

TorchGroup expand(const TorchGroup& g) {
  auto group = backend_of(g).group();
  return renewed(g, group.expand());
}

std::vector<int> newcomers(const TorchGroup& g) {
  return backend_of(g).group().newcomers();
}

void sync_state(const TorchGroup& g, const std::vector<std::string>& names,
                const std::vector<at::Tensor>& tensors, int root) {
  TORCH_CHECK(names.size() == tensors.size(), "collie_torch: sync_state: ", names.size(),
              " names for ", tensors.size(), " tensors");
  std::vector<collie::StateBuffer> state;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous(), "collie_torch: sync_state: tensor '",
                names[i], "' must be a contiguous CPU tensor here (elastic.py stages the others)");
    state.push_back({names[i], check_tensor(t, "sync_state"), t.data_ptr(), count_of(t)});
  }
  auto group = backend_of(g).group();
  group.sync_state(state, root);
}

}  // namespace

void add_elastic(py::module_& m) {
  const auto no_gil = py::call_guard<py::gil_scoped_release>();
  m.def("elastic_init", &elastic_init, py::arg("timeout") = py::none(), no_gil,
        "A collie group of the job's ranks (collie::init() from RANK, WORLD_SIZE, MASTER_ADDR "
        "and MASTER_PORT), or, with COLLIE_JOIN=1, the group the members' next expand() makes "
        "with this newcomer, as a torch process group.");
  m.def("elastic_shrink", &shrink, py::arg("group"), py::arg("timeout") = py::none(), no_gil,
        "The group's live members as a new group (collie's ProcessGroup::shrink()); the old one "
        "is revoked.");
  m.def("elastic_expand", &expand, py::arg("group"), no_gil,
        "The members and the newcomers waiting now as a new group (ProcessGroup::expand()); the "
        "same group where none waits.");
  m.def("elastic_newcomers", &newcomers, py::arg("group"),
        "The ranks that joined at the expand() that made this group.");
  m.def("elastic_sync_state", &sync_state, py::arg("group"), py::arg("names"),
        py::arg("tensors"), py::arg("root") = 0, no_gil,
        "Named contiguous CPU tensors from `root` to every member (ProcessGroup::sync_state()).");
}

}  // namespace collie_torch
