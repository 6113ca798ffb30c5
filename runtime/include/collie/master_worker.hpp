// Master-worker mode: one program on every rank; rank 0 (the master) owns
// buffers that live on the other ranks (the workers) and queues work on
// them, as the torch.distributed RFC's second mode planned.
//
//   int main() {
//     collie::ProcessGroup world = collie::init();   // collie launch -n 5 -- ./prog
//     collie::mw::Kernels kernels;
//     kernels.add("square", [](collie::mw::KernelArgs& a) {
//       for (float& x : a.output<float>(0)) x *= x;
//       return 0.0;
//     });
//     return collie::mw::run(world, kernels, [](collie::mw::Master& m) {
//       auto x = m.alloc<float>(/*worker=*/1, 1024);
//       m.fill(x, 3);                       // returns at once
//       m.call(1, "square", {}, {x});       // queued after the fill
//       std::vector<float> v = m.read<float>(x).get();   // a sync point: 9, 9, ...
//     });
//   }
//
// The model.
// - Ownership: the master owns every buffer. A Buffer is a handle (copies
//   share it); when the master's last handle goes, the worker frees the
//   memory, after every operation queued on it before.
// - Order: each worker runs the operations queued on it one after another,
//   in the order the master's program queued them (its stream). A copy
//   between two workers, and a collective among the workers, take their
//   place in each stream involved; data moves straight between workers,
//   never through the master.
// - Sync points: every call returns at once with an Event (or a Future of
//   a value). Reads and writes are the only way data crosses between the
//   master and a worker; wait on their events to know it has. A read's or a
//   write's memory on the master is collie's until its event is done.
// - Flow control: at most `window` operations per worker are in flight
//   (Options); the next call waits for one to finish, so the master's memory
//   and the worker's queue stay bounded however many are queued.
//
// Failures.
// - An operation that fails on a worker (a kernel throws, memory runs out, a
//   poisoned input) fails its event with the worker's message, naming the
//   worker, its rank and host, and the operation. Its output buffers are
//   poisoned: later operations that use them fail naming the first cause.
//   Other buffers, and other workers, go on.
// - A worker that dies (exits, crashes, is killed): within a second every
//   pending event that depended on it fails naming it; calls on its buffers
//   throw ConnectionError at once; copies and collectives it took part in
//   fail on the other workers too, naming it; the other workers keep their
//   data and their streams.
// - The master that dies: each worker's run() throws ConnectionError naming
//   the master within a second of noticing (a worker inside a long kernel
//   notices when it returns); under `collie launch` the job fails, blaming
//   rank 0.
// - A worker that hangs (stopped, deadlocked, in an endless kernel): after
//   the stall time (COLLIE_STALL_TIME, 30 s) with operations queued and none
//   finished, the master's log names it and what its process is doing
//   (stopped, alive) where it is on the master's host, and a wait that
//   times out says so. Nothing fails for it: a long kernel is legitimate.
// - The master's program returning (or throwing) with operations queued:
//   run() waits for them, shuts the workers down, and returns (or rethrows).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <collie/dtype.hpp>
#include <collie/process_group.hpp>
#include <collie/reduce.hpp>

namespace collie::mw {

namespace detail {
struct OpState;      // an operation's outcome, shared by its events
struct BufferState;  // what a Buffer names
struct MasterState;  // the master's side of the run
}  // namespace detail

// A queued operation. Waiting throws the operation's error (collie::Error:
// RequestError for a failure on the worker, ConnectionError for a worker
// that died). An Event dropped unwaited is fine: the operation still runs.
class Event {
 public:
  Event();  // done, with no error
  // Blocks until the operation is done; throws its error if it failed.
  // Waits at most the run's timeout (Options::timeout, COLLIE_TIMEOUT by
  // default), as wait(timeout) does.
  void wait() const;
  // Throws TimeoutError naming the operation, its worker and what the
  // stall watch saw of it after `timeout` (the operation stays queued).
  void wait(std::chrono::milliseconds timeout) const;
  // True once done, successfully or not. Never blocks.
  bool ready() const;
  // "fill(float32[1024] #3) on worker 1"
  const std::string& what() const;

 protected:
  friend struct detail::MasterState;
  explicit Event(std::shared_ptr<detail::OpState> op);
  double value() const;                      // after wait(): a reduction's or kernel's result
  std::shared_ptr<void> kept() const;        // after wait(): what a read filled
  std::shared_ptr<detail::OpState> op_;
};

// An Event with a value: a reduction's scalar, a kernel's return, a read.
template <class T>
class Future : public Event {
 public:
  Future() = default;
  // Waits, and returns the value (throws the operation's error).
  T get() const {
    wait();
    if constexpr (std::is_same_v<T, double>)
      return value();
    else
      return *std::static_pointer_cast<T>(kept());
  }

 private:
  friend class Master;
  explicit Future(Event e) : Event(std::move(e)) {}
};

// A typed buffer on one worker. Cheap to copy; the last copy frees it.
class Buffer {
 public:
  Buffer() = default;
  int worker() const;  // the worker's rank
  DataType dtype() const;
  std::size_t count() const;
  std::size_t bytes() const;
  std::uint64_t id() const;
  // The CUDA device it is on, on its worker; -1: host memory.
  int device() const;
  // "float32[1024] #3 on worker 1", "float32[1024] #4 on worker 1 (cuda:0)"
  std::string describe() const;
  explicit operator bool() const { return state_ != nullptr; }

 private:
  friend struct detail::MasterState;
  friend class Master;
  explicit Buffer(std::shared_ptr<detail::BufferState> s) : state_(std::move(s)) {}
  std::shared_ptr<detail::BufferState> state_;
};

// What a user kernel sees, on the worker: its buffers, as spans of the
// type the kernel names (a wrong type throws), and the scalars it was given.
class KernelArgs {
 public:
  struct Slot {
    DataType dtype;
    void* data;  // device memory where device >= 0: the kernel launches its own work there
    std::size_t count;
    int device = -1;
  };
  KernelArgs(int worker, std::vector<Slot> inputs, std::vector<Slot> outputs,
             std::vector<double> scalars, std::string text = {})
      : worker_(worker), inputs_(std::move(inputs)), outputs_(std::move(outputs)),
        scalars_(std::move(scalars)), text_(std::move(text)) {}
  int worker() const { return worker_; }
  std::size_t inputs() const { return inputs_.size(); }
  std::size_t outputs() const { return outputs_.size(); }
  const std::vector<double>& scalars() const { return scalars_; }
  double scalar(std::size_t i) const;
  // The call's text argument (empty if none): what the kernel needs that
  // is not a number, e.g. an operation's name and its tensors' shapes.
  const std::string& text() const { return text_; }
  const std::vector<Slot>& input_slots() const { return inputs_; }
  const std::vector<Slot>& output_slots() const { return outputs_; }
  template <class T>
  std::span<const T> input(std::size_t i) const {
    const Slot& s = slot(inputs_, i, dtype_of<T>, "input");
    return {static_cast<const T*>(s.data), s.count};
  }
  template <class T>
  std::span<T> output(std::size_t i) const {
    const Slot& s = slot(outputs_, i, dtype_of<T>, "output");
    return {static_cast<T*>(s.data), s.count};
  }

 private:
  const Slot& slot(const std::vector<Slot>& slots, std::size_t i, DataType want,
                   const char* kind) const;
  int worker_;
  std::vector<Slot> inputs_, outputs_;
  std::vector<double> scalars_;
  std::string text_;
};

// A kernel returns a scalar (the call's Future value; 0 if it has none).
// Any exception it throws fails the call and poisons its outputs.
using Kernel = std::function<double(KernelArgs&)>;

// Named kernels, registered alike on every rank (the same program does).
class Kernels {
 public:
  // Throws ArgumentError for an empty name or one already taken.
  void add(std::string name, Kernel kernel);
  const Kernel* find(std::string_view name) const;  // null if unknown

 private:
  std::map<std::string, Kernel, std::less<>> kernels_;
};

struct Options {
  // Operations in flight per worker before a call waits (>= 1).
  std::size_t window = 1024;
  // How long a call may wait for room in a window, an Event's wait() for
  // its operation, and synchronize() and the end of the run for a worker
  // that finishes nothing; default: the group's timeout (COLLIE_TIMEOUT).
  std::chrono::milliseconds timeout{0};
};

// The master's side: everything it queues on the workers.
class Master {
 public:
  // The workers' ranks: 1 to world size - 1.
  int world_size() const;
  // "worker 2 (rank 2 at 10.0.0.5:41234)"
  std::string describe_worker(int worker) const;

  // A buffer of `count` elements on `worker`, uninitialised: host memory,
  // or with `device` >= 0 memory on that CUDA device of the worker (where
  // collie is built with CUDA; the built-in operations stage it through
  // host memory, kernels get the device pointer). Throws ArgumentError for
  // a rank that is not a worker, ConnectionError for one that died; running
  // out of memory there, or a device it lacks, fails its first use.
  Buffer alloc(int worker, DataType dtype, std::size_t count, int device = -1);
  template <class T>
  Buffer alloc(int worker, std::size_t count, int device = -1) {
    return alloc(worker, dtype_of<T>, count, device);
  }

  // Elementwise, on one worker. Integer buffers take integral scalars
  // (ArgumentError otherwise, and for a value out of the dtype's range) and
  // wrap around on overflow; 16-bit floats compute in float.
  Event fill(const Buffer& b, double value);
  Event scale(const Buffer& b, double factor);
  // y += a * x (the same dtype, count and worker).
  Event axpy(const Buffer& y, double a, const Buffer& x);
  // acc = op(acc, in), element by element, with reduce.hpp's semantics.
  Event combine(const Buffer& acc, const Buffer& in, ReduceOp op = ReduceOp::Sum);
  // out = op(a, b), element by element.
  Event binary(const Buffer& out, const Buffer& a, ReduceOp op, const Buffer& b);
  // op over every element (sum, prod, min, max, avg), in double.
  Future<double> reduce(const Buffer& b, ReduceOp op = ReduceOp::Sum);

  // The sync points. `data` holds exactly b.bytes() bytes and is collie's
  // until the event is done.
  Event write(const Buffer& b, const void* data, std::size_t bytes);
  template <class T>
  Event write(const Buffer& b, std::span<const T> data) {
    check_type(b, dtype_of<T>, "write");
    return write(b, data.data(), data.size_bytes());
  }
  Event read(const Buffer& b, void* out, std::size_t bytes);
  template <class T>
  Event read(const Buffer& b, std::span<T> out) {
    check_type(b, dtype_of<T>, "read");
    return read(b, out.data(), out.size_bytes());
  }
  // The buffer's contents, in a vector the future owns.
  template <class T>
  Future<std::vector<T>> read(const Buffer& b) {
    check_type(b, dtype_of<T>, "read");
    auto v = std::make_shared<std::vector<T>>(b.count());
    return Future<std::vector<T>>(read_kept(b, v, v->data(), b.bytes()));
  }

  // dst = src: same dtype and count; between two workers the data goes
  // straight from one to the other.
  Event copy(const Buffer& dst, const Buffer& src);

  // A kernel registered under `name`, on `worker`: it reads `inputs` and
  // writes `outputs` (buffers on that worker), given `scalars` and `text`.
  // An unknown name throws ArgumentError here, at the call.
  Future<double> call(int worker, std::string_view name, const std::vector<Buffer>& inputs,
                      const std::vector<Buffer>& outputs, const std::vector<double>& scalars = {},
                      std::string_view text = {});

  // Collectives among all the workers: one buffer on each worker, in
  // worker order, alike in dtype and count. all_gather's outputs hold
  // (world_size() - 1) inputs each.
  Event all_reduce(const std::vector<Buffer>& buffers, ReduceOp op = ReduceOp::Sum);
  Event broadcast(const std::vector<Buffer>& buffers, int root_worker);
  Event all_gather(const std::vector<Buffer>& inputs, const std::vector<Buffer>& outputs);

  // The bytes of the buffers `worker` holds, once what was queued before
  // has run (freed handles included).
  Future<double> memory(int worker);

  // Waits until every operation queued so far has finished (their errors
  // stay with their events). Throws TimeoutError naming each worker that
  // finishes nothing for the run's timeout with work queued.
  void synchronize();

 private:
  friend int run(ProcessGroup&, const Kernels&, const std::function<void(Master&)>&,
                 const Options&);
  explicit Master(std::shared_ptr<detail::MasterState> s) : state_(std::move(s)) {}
  static void check_type(const Buffer& b, DataType want, const char* what);
  Event read_kept(const Buffer& b, std::shared_ptr<void> keep, void* out, std::size_t bytes);
  std::shared_ptr<detail::MasterState> state_;
};

// Runs the job: rank 0 runs `master` and then shuts the workers down; every
// other rank serves as a worker until then. Every rank of `world` calls it,
// with the same kernels. Returns 0; rethrows what `master` threw (after
// shutting the workers down); on a worker, throws ConnectionError when the
// master is gone.
int run(ProcessGroup& world, const Kernels& kernels, const std::function<void(Master&)>& master,
        const Options& options = {});

}  // namespace collie::mw
