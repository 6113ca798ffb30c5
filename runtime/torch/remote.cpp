// Master-worker mode for Python (collie_torch.remote): the C++ core
// (collie/master_worker.hpp) with one kernel, "torch", that runs a torch
// operation on the worker: its buffers become tensors there (no copy) and
// a Python dispatcher (collie_torch/remote.py's _dispatch) applies the
// operation the call's text names.
//
// The master's Python program goes on after start(): run() runs on a
// thread of its own until finish() (at exit). A worker serves in start()
// and returns when the master is done (remote.py then exits).
#include "remote.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/utils/pybind.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include <collie/collie.hpp>
#include <collie/master_worker.hpp>

#include "tensors.hpp"

namespace py = pybind11;
namespace mw = collie::mw;

namespace collie_torch {

namespace {

at::ScalarType torch_type(collie::DataType t) {
  for (auto s : {at::kBool, at::kChar, at::kByte, at::kShort, at::kInt, at::kLong, at::kHalf,
                 at::kBFloat16, at::kFloat, at::kDouble})
    if (dtype_of(s) == t) return s;
  throw collie::ArgumentError("collie_torch.remote: torch has no dtype for collie's " +
                              std::string(collie::dtype_name(t)));
}

collie::DataType collie_type(const std::string& name) {
  const auto t = collie::parse_dtype(name);
  if (!t) throw collie::ArgumentError("collie_torch.remote: unknown dtype '" + name + "'");
  return *t;
}

// The buffers of a kernel call as flat tensors over the worker's memory
// (host, or a CUDA device's).
py::list tensors(const std::vector<mw::KernelArgs::Slot>& slots) {
  py::list out;
  for (const auto& s : slots) {
    const auto n = static_cast<std::int64_t>(s.count);
    auto options = at::TensorOptions().dtype(torch_type(s.dtype));
    if (s.device >= 0) options = options.device(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(s.device)));
    out.append(at::from_blob(s.data, {n}, options));
  }
  return out;
}

// One process's session: on the master, the run() thread and its Master.
struct Session {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  mw::Master* master = nullptr;
  std::thread runner;
  std::exception_ptr failed;
  std::optional<collie::ProcessGroup> world;
  mw::Kernels kernels;
};

Session& session() {
  static Session* s = new Session;  // never destroyed: finish() ends it at exit
  return *s;
}

mw::Master& master() {
  auto& s = session();
  if (s.master == nullptr)
    throw collie::Error("collie_torch.remote: not the master of a running session "
                        "(call init_master_worker() first, on every rank)");
  return *s.master;
}

// An event and what it must keep alive until it is done (a tensor read
// into or written from).
struct PyEvent {
  mw::Event event;
  std::optional<mw::Future<double>> future;
  py::object keep;
  void wait(std::optional<double> timeout_s) {
    py::gil_scoped_release release;
    if (timeout_s)
      event.wait(std::chrono::milliseconds(static_cast<std::int64_t>(*timeout_s * 1000)));
    else
      event.wait();
  }
  double value() {
    py::gil_scoped_release release;
    return future ? future->get() : 0.0;
  }
};

// A write from, or a read into, a local tensor: its event keeps the tensor
// alive until done.
PyEvent transfer(const mw::Buffer& b, const at::Tensor& t, bool write) {
  TORCH_CHECK(t.is_contiguous() && t.device().is_cpu(), "collie_torch.remote: ",
              write ? "write" : "read", " takes a contiguous CPU tensor");
  PyEvent e;
  e.keep = py::cast(t);
  py::gil_scoped_release release;
  const auto bytes = static_cast<std::size_t>(t.numel()) * t.element_size();
  e.event = write ? master().write(b, t.data_ptr(), bytes) : master().read(b, t.data_ptr(), bytes);
  return e;
}

bool start(py::object dispatch) {
  auto& s = session();
  if (s.world) throw collie::Error("collie_torch.remote: init_master_worker() was called twice");
  {
    py::gil_scoped_release release;
    s.world = collie::init();
  }
  // dispatch(text, inputs, outputs) -> float, with the GIL held.
  auto fn = std::make_shared<py::object>(std::move(dispatch));
  s.kernels.add("torch", [fn](mw::KernelArgs& a) -> double {
    py::gil_scoped_acquire gil;
    try {
      return (*fn)(a.text(), tensors(a.input_slots()), tensors(a.output_slots())).cast<double>();
    } catch (py::error_already_set& e) {
      throw std::runtime_error(e.what());
    }
  });
  // How many CUDA devices collie can place buffers on, here.
  s.kernels.add("cuda_devices",
                [](mw::KernelArgs&) { return static_cast<double>(collie::cuda::device_count()); });
  if (s.world->rank() != 0) {
    py::gil_scoped_release release;
    mw::run(*s.world, s.kernels, [](mw::Master&) {});
    s.world.reset();  // connections closed before Python exits
    return false;
  }
  std::promise<void> ready;
  auto started = ready.get_future();
  s.runner = std::thread([&s, ready = std::move(ready)]() mutable {
    try {
      mw::run(*s.world, s.kernels, [&](mw::Master& m) {
        std::unique_lock lock(s.mu);
        s.master = &m;
        ready.set_value();
        s.cv.wait(lock, [&] { return s.done; });
        s.master = nullptr;
      });
    } catch (...) {
      s.failed = std::current_exception();
      try {
        ready.set_value();
      } catch (const std::future_error&) {
      }
    }
  });
  {
    py::gil_scoped_release release;
    started.wait();
  }
  if (s.failed) std::rethrow_exception(s.failed);
  return true;
}

void finish() {
  auto& s = session();
  if (!s.runner.joinable()) return;
  py::gil_scoped_release release;
  {
    std::lock_guard lock(s.mu);
    s.done = true;
  }
  s.cv.notify_all();
  s.runner.join();
  s.world.reset();
  if (s.failed) std::rethrow_exception(s.failed);
}

}  // namespace

void add_remote(py::module_& m) {
  py::class_<mw::Buffer>(m, "RemoteBuffer")
      .def_property_readonly("worker", &mw::Buffer::worker)
      .def_property_readonly("count", &mw::Buffer::count)
      .def_property_readonly("dtype",
                             [](const mw::Buffer& b) { return std::string(collie::dtype_name(b.dtype())); })
      .def("__repr__", &mw::Buffer::describe);
  py::class_<PyEvent>(m, "RemoteEvent")
      .def("wait", &PyEvent::wait, py::arg("timeout") = py::none(),
           "Blocks until done; raises the operation's error (after `timeout` seconds: a "
           "timeout error)")
      .def("ready", [](const PyEvent& e) { return e.event.ready(); })
      .def("value", &PyEvent::value, "Waits, and returns a kernel's float")
      .def_property_readonly("what", [](const PyEvent& e) { return e.event.what(); });
  m.def("mw_start", &start, py::arg("dispatch"),
        "Joins the job (env://) and starts master-worker mode: True on rank 0 (the master), "
        "False on a worker once the master is done.");
  m.def("mw_finish", &finish, "Ends the master's session: waits for what is queued, shuts the "
                              "workers down.");
  m.def("mw_world_size", [] { return master().world_size(); });
  m.def("mw_alloc", [](int worker, const std::string& dtype, std::size_t count, int device) {
    py::gil_scoped_release release;
    return master().alloc(worker, collie_type(dtype), count, device);
  }, py::arg("worker"), py::arg("dtype"), py::arg("count"), py::arg("device") = -1);
  m.def("mw_cuda_devices", [](int worker) {
    py::gil_scoped_release release;
    return static_cast<int>(master().call(worker, "cuda_devices", {}, {}).get());
  }, "How many CUDA devices `worker` can hold buffers on (0 without CUDA).");
  m.def("mw_write", [](const mw::Buffer& b, const at::Tensor& t) { return transfer(b, t, true); });
  m.def("mw_read", [](const mw::Buffer& b, const at::Tensor& t) { return transfer(b, t, false); });
  m.def("mw_copy", [](const mw::Buffer& dst, const mw::Buffer& src) {
    PyEvent e;
    py::gil_scoped_release release;
    e.event = master().copy(dst, src);
    return e;
  });
  m.def("mw_torch", [](int worker, const std::vector<mw::Buffer>& inputs,
                       const std::vector<mw::Buffer>& outputs, const std::string& text) {
    PyEvent e;
    py::gil_scoped_release release;
    e.future = master().call(worker, "torch", inputs, outputs, {}, text);
    e.event = *e.future;
    return e;
  });
  m.def("mw_all_reduce", [](const std::vector<mw::Buffer>& buffers, const std::string& op) {
    const auto rop = collie::parse_reduce_op(op);
    if (!rop) throw collie::ArgumentError("collie_torch.remote: unknown reduce op '" + op + "'");
    PyEvent e;
    py::gil_scoped_release release;
    e.event = master().all_reduce(buffers, *rop);
    return e;
  });
  m.def("mw_describe_worker", [](int w) { return master().describe_worker(w); });
  m.def("mw_synchronize", [] {
    py::gil_scoped_release release;
    master().synchronize();
  }, "Waits until every operation queued so far has run.");
}

}  // namespace collie_torch
