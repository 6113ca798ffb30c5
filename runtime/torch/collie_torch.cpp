// collie as a torch.distributed backend (torch 1.13's c10d API).
//
//   import collie_torch                       # registers "collie"
//   dist.init_process_group("collie", ...)    # every tutorial call runs on collie
//
// Each torch process group (the default one, and each new_group) is a
// collie group of its own: its ranks meet in the store torch hands the
// backend (TorchStore below, a collie::store::Store over torch's), under
// "collie/" there, and open their own mesh (shared memory between ranks of
// one host, TCP between hosts, as collie::init does).
//
// Collectives run in call order, one at a time, with collie's blocking
// calls: on the group's worker thread, or in the thread that waits for the
// next one while none runs (torch's blocking calls wait at once); their
// Work completes (and its future is marked) when the call returns. Sends and receives are posted at once
// (collie's isend/irecv/irecv_any: a receive never blocks a later send of
// the same process) and complete in whichever thread waits; their futures
// are completed by a second thread, started the first time one is asked
// for. collie's errors (MismatchError naming both calls, a dead peer named,
// a timeout) reach Python as RuntimeError with collie's message.
//
// Tensors: CPU, contiguous, one per list (torch's lists of several are for
// several GPUs per process), of the dtypes collie has: bool, int8, uint8,
// int16, int32, int64, float16, bfloat16, float32, float64. Anything else
// fails at once with a message naming it.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>

#include <collie/error.hpp>
#include <collie/process_group.hpp>
#include <collie/store/store.hpp>
#include <collie/version.hpp>

namespace collie_torch {

namespace {

using Clock = std::chrono::steady_clock;

// ---- the store --------------------------------------------------------------

// collie's Store interface over torch's c10d::Store. torch's store has no
// per-call timeout on get (a wait with one comes first), no listing and no
// server-side barrier (made of add and wait here). Calls are serialised: a
// torch store client is one socket.
class TorchStore final : public collie::store::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(std::string_view key, std::string_view value, collie::store::Timeout) override {
    call("set", key, [&] { store_->set(std::string(key), bytes(value)); });
  }
  std::string get(std::string_view key, collie::store::Timeout timeout) override {
    std::string out;
    call("get", key, [&] {
      store_->wait({std::string(key)}, limit(timeout));
      out = text(store_->get(std::string(key)));
    });
    return out;
  }
  std::optional<std::string> try_get(std::string_view key, collie::store::Timeout) override {
    std::optional<std::string> out;
    call("get", key, [&] {
      if (store_->check({std::string(key)})) out = text(store_->get(std::string(key)));
    });
    return out;
  }
  std::int64_t add(std::string_view key, std::int64_t delta, collie::store::Timeout) override {
    std::int64_t out = 0;
    call("add", key, [&] { out = store_->add(std::string(key), delta); });
    return out;
  }
  collie::store::CompareSetResult compare_set(std::string_view key, std::string_view expected,
                                              std::string_view desired,
                                              collie::store::Timeout) override {
    collie::store::CompareSetResult out;
    call("compare_set", key, [&] {
      const std::string now = text(
          store_->compareSet(std::string(key), bytes(expected), bytes(desired)));
      out.swapped = now == desired;  // torch answers with the value after the call
      if (now == desired || store_->check({std::string(key)})) out.current = now;
    });
    return out;
  }
  void wait(std::span<const std::string> keys, collie::store::Timeout timeout) override {
    call("wait", keys.empty() ? std::string_view() : std::string_view(keys.front()), [&] {
      store_->wait(std::vector<std::string>(keys.begin(), keys.end()), limit(timeout));
    });
  }
  bool check(std::span<const std::string> keys, collie::store::Timeout) override {
    bool out = false;
    call("check", keys.empty() ? std::string_view() : std::string_view(keys.front()), [&] {
      out = store_->check(std::vector<std::string>(keys.begin(), keys.end()));
    });
    return out;
  }
  bool delete_key(std::string_view key, collie::store::Timeout) override {
    bool out = false;
    call("delete_key", key, [&] { out = store_->deleteKey(std::string(key)); });
    return out;
  }
  std::int64_t count_keys(std::string_view prefix, collie::store::Timeout) override {
    if (!prefix.empty()) unsupported("counting keys by prefix");
    std::int64_t out = 0;
    call("num_keys", prefix, [&] { out = store_->getNumKeys(); });
    return out;
  }
  std::vector<std::string> list_keys(std::string_view, collie::store::Timeout) override {
    unsupported("listing keys");
  }
  std::vector<std::string> multi_get(std::span<const std::string> keys,
                                     collie::store::Timeout timeout) override {
    wait(keys, timeout);
    std::vector<std::string> out;
    for (const auto& k : keys)
      call("get", k, [&] { out.push_back(text(store_->get(k))); });
    return out;
  }
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                 collie::store::Timeout timeout) override {
    if (keys.size() != values.size())
      throw collie::ArgumentError("multi_set: as many values as keys, please");
    for (std::size_t i = 0; i < keys.size(); ++i)
      set(keys[i], values[i], timeout);
  }
  void append(std::string_view key, std::string_view value, collie::store::Timeout) override {
    // compare_set until no other client appended between the read and the write.
    for (;;) {
      const std::string before = try_get(key, {}).value_or("");
      const std::string after = before + std::string(value);
      std::string now;
      call("append", key, [&] {
        now = text(store_->compareSet(std::string(key), bytes(before), bytes(after)));
      });
      if (now == after) return;
    }
  }
  // n callers: each counts itself in; the n-th of each round opens it.
  void barrier(std::string_view name, std::uint32_t n, collie::store::Timeout timeout) override {
    const std::string base = "barrier/" + std::string(name);
    const std::int64_t arrived = add(base + "/arrived", 1, timeout);
    const std::int64_t round = (arrived - 1) / n;
    const std::string open = base + "/open/" + std::to_string(round);
    if (arrived % n == 0) set(open, "1", timeout);
    const std::string keys[] = {open};
    wait(keys, timeout);
  }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(store_->getTimeout());
  }

 private:
  static std::vector<std::uint8_t> bytes(std::string_view s) {
    return std::vector<std::uint8_t>(s.begin(), s.end());
  }
  static std::string text(const std::vector<std::uint8_t>& v) {
    return std::string(v.begin(), v.end());
  }
  std::chrono::milliseconds limit(collie::store::Timeout t) const {
    return t.value_or(std::chrono::duration_cast<std::chrono::milliseconds>(store_->getTimeout()));
  }
  [[noreturn]] static void unsupported(const char* what) {
    throw collie::Error(std::string("torch's store does not support ") + what);
  }
  // Runs one store call; torch's errors become collie's (a timeout is a
  // TimeoutError, anything else a ConnectionError), naming the key.
  template <class F>
  void call(const char* op, std::string_view key, F&& f) {
    std::lock_guard lock(mu_);
    try {
      f();
    } catch (const collie::Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const std::string message =
          std::string("torch's store: ") + op + " '" + std::string(key) + "': " + first_line(what);
      if (what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos)
        throw collie::TimeoutError(message);
      throw collie::ConnectionError(message);
    }
  }
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  std::mutex mu_;
  c10::intrusive_ptr<c10d::Store> store_;
};

// PrefixStore keeps its prefix protected; a member pointer taken in a
// derived class reads it.
struct PrefixOf : c10d::PrefixStore {
  static const std::string& of(const c10d::PrefixStore& s) { return s.*(&PrefixOf::prefix_); }
};

// Where the store is and which namespace of it a group uses, alike on
// every rank ("127.0.0.1:29500 default_pg/1"), and the host to route to.
struct StoreIdentity {
  std::string name;
  std::string host;
};

StoreIdentity identify(c10::intrusive_ptr<c10d::Store> store) {
  StoreIdentity id;
  std::string prefixes;
  for (int depth = 0; store && depth < 64; ++depth) {
    if (auto* p = dynamic_cast<c10d::PrefixStore*>(store.get())) {
      prefixes = PrefixOf::of(*p) + (prefixes.empty() ? "" : "/" + prefixes);
      store = p->getUnderlyingStore();
      continue;
    }
    if (auto* t = dynamic_cast<c10d::TCPStore*>(store.get())) {
      id.host = t->getHost();
      id.name = t->getHost() + ":" + std::to_string(t->getPort());
    } else {
      id.name = "store";
    }
    break;
  }
  id.name += " " + prefixes;
  return id;
}

// ---- tensors -----------------------------------------------------------------

std::optional<collie::DataType> dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kBool:
      return collie::DataType::Bool;
    case at::kChar:
      return collie::DataType::Int8;
    case at::kByte:
      return collie::DataType::UInt8;
    case at::kShort:
      return collie::DataType::Int16;
    case at::kInt:
      return collie::DataType::Int32;
    case at::kLong:
      return collie::DataType::Int64;
    case at::kHalf:
      return collie::DataType::Float16;
    case at::kBFloat16:
      return collie::DataType::BFloat16;
    case at::kFloat:
      return collie::DataType::Float32;
    case at::kDouble:
      return collie::DataType::Float64;
    default:
      return std::nullopt;
  }
}

collie::ReduceOp op_of(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return collie::ReduceOp::Sum;
    case c10d::ReduceOp::AVG:
      return collie::ReduceOp::Avg;
    case c10d::ReduceOp::PRODUCT:
      return collie::ReduceOp::Product;
    case c10d::ReduceOp::MIN:
      return collie::ReduceOp::Min;
    case c10d::ReduceOp::MAX:
      return collie::ReduceOp::Max;
    case c10d::ReduceOp::BAND:
      return collie::ReduceOp::BitwiseAnd;
    case c10d::ReduceOp::BOR:
      return collie::ReduceOp::BitwiseOr;
    case c10d::ReduceOp::BXOR:
      return collie::ReduceOp::BitwiseXor;
    default:
      TORCH_CHECK(false, "collie: reduce op ", static_cast<int>(op.op_),
                  " (PREMUL_SUM) is not supported; use SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR or "
                  "BXOR");
  }
}

// Checks a tensor collie can move and says what is wrong otherwise.
collie::DataType check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "collie: ", op, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "collie: ", op, ": a tensor on ", t.device().str(),
              "; the collie backend takes CPU tensors (use gloo or nccl for device tensors, or "
              "move it with .cpu())");
  TORCH_CHECK(t.layout() == at::kStrided, "collie: ", op, ": a sparse tensor; only dense ones");
  TORCH_CHECK(t.is_contiguous(), "collie: ", op,
              ": a tensor that is not contiguous; pass tensor.contiguous() (and copy the result "
              "back)");
  const auto d = dtype_of(t.scalar_type());
  TORCH_CHECK(d.has_value(), "collie: ", op, ": dtype ", t.scalar_type(),
              " is not one collie carries (bool, int8, uint8, int16, int32, int64, float16, "
              "bfloat16, float32, float64)");
  return *d;
}

// Input and output of one call must have one dtype: bytes move as they are.
void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "collie: ", op, ": tensors of dtypes ",
              a.scalar_type(), " and ", b.scalar_type(), "; they must be the same");
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "collie: ", op, ": ", tensors.size(),
              " tensors in a list; the collie backend takes one per call");
  return tensors.front();
}

std::size_t count_of(const at::Tensor& t) {
  return static_cast<std::size_t>(t.numel());
}

collie::CollectiveOptions options_for(std::chrono::milliseconds timeout) {
  collie::CollectiveOptions o;
  o.memory = collie::MemoryKind::Host;
  if (timeout.count() >= 0 && timeout != c10d::kUnsetTimeout) o.timeout = timeout;
  return o;
}

// ---- work ----------------------------------------------------------------------

c10::intrusive_ptr<c10::ivalue::Future> new_future() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
}

// A collective: completed by the group's worker when its call returns.
class Runner;

// A collective: completed when its call returned, on the group's worker
// or in a thread that waited for it first (Runner).
class CollectiveWork final : public c10d::Work {
 public:
  CollectiveWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs,
                 std::weak_ptr<Runner> runner)
      : c10d::Work(rank, type),
        outputs_(std::move(outputs)),
        future_(new_future()),
        runner_(std::move(runner)) {}

  bool wait(std::chrono::milliseconds timeout) override;

  void complete(std::exception_ptr error) {
    if (error)
      future_->setError(error);
    else
      future_->markCompleted(c10::IValue(outputs_));
    finish(error);
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<Runner> runner_;
};

// A group's collectives, run one at a time in call order: by its worker
// thread, or by a thread that waits for the one at the head of the queue
// while nothing runs (a blocking torch call waits at once: running it there
// saves waking the worker and being woken by it).
class Runner {
 public:
  using Task = std::pair<std::function<void()>, c10::intrusive_ptr<CollectiveWork>>;

  void post(Task task) {
    {
      std::lock_guard lock(mu_);
      TORCH_CHECK(!stopping_, "collie: the process group is being destroyed");
      queue_.push_back(std::move(task));
    }
    cv_.notify_all();
  }

  // Runs `work` here if it is next and nothing runs.
  void run_if_next(const CollectiveWork* work) {
    Task task;
    {
      std::lock_guard lock(mu_);
      if (busy_ || queue_.empty() || queue_.front().second.get() != work) return;
      task = take();
    }
    execute(task);
  }

  // The worker: until stopped and the queue is empty.
  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !busy_ && (!queue_.empty() || stopping_); });
        if (queue_.empty()) return;
        task = take();
      }
      execute(task);
    }
  }

  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
  }

 private:
  Task take() {  // mu_ held
    busy_ = true;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    return task;
  }
  void execute(Task& task) {
    std::exception_ptr error;
    try {
      task.first();
    } catch (...) {
      error = std::current_exception();
    }
    task.first = nullptr;  // its tensors go before the next call runs
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
    task.second->complete(error);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool busy_ = false;
  bool stopping_ = false;
};

bool CollectiveWork::wait(std::chrono::milliseconds timeout) {
  if (auto runner = runner_.lock()) runner->run_if_next(this);
  return c10d::Work::wait(timeout);
}

class Completer;

// A send or receive: collie's Work, waited on by whoever asks.
class PointToPointWork final : public c10d::Work {
 public:
  PointToPointWork(int rank, c10d::OpType type, std::vector<at::Tensor> tensors,
                   collie::Work work, std::weak_ptr<Completer> completer)
      : c10d::Work(rank, type),
        tensors_(std::move(tensors)),
        work_(std::move(work)),
        completer_(std::move(completer)) {}

  bool isCompleted() override {
    {
      std::lock_guard lock(settle_mu_);
      if (settled_) return true;
      if (!work_.is_completed()) return false;
    }
    settle(std::nullopt);
    return true;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    settle(timeout == kNoTimeout ? std::nullopt : std::optional(timeout));
    std::lock_guard lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  int sourceRank() const override {
    std::lock_guard lock(settle_mu_);
    return source_;
  }
  std::vector<at::Tensor> result() override { return tensors_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Waits for collie's Work (once: later calls see how it ended) and
  // completes this one and its future.
  void settle(std::optional<std::chrono::milliseconds> timeout) {
    std::lock_guard lock(settle_mu_);
    if (settled_) return;
    std::exception_ptr error;
    try {
      if (timeout)
        work_.wait(*timeout);
      else
        work_.wait();
      source_ = work_.source();
    } catch (...) {
      error = std::current_exception();
    }
    settled_ = true;
    if (future_) {
      if (error)
        future_->setError(error);
      else
        future_->markCompleted(c10::IValue(tensors_));
    }
    finish(error);
  }

 private:
  std::vector<at::Tensor> tensors_;
  mutable std::mutex settle_mu_;
  collie::Work work_;
  bool settled_ = false;
  int source_ = -1;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<Completer> completer_;
};

// Settles point-to-point Works whose futures were asked for, in order, on
// a thread of its own.
class Completer {
 public:
  ~Completer() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void add(c10::intrusive_ptr<PointToPointWork> work) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(work));
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      c10::intrusive_ptr<PointToPointWork> next;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next->settle(std::nullopt);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<PointToPointWork>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

c10::intrusive_ptr<c10::ivalue::Future> PointToPointWork::getFuture() {
  {
    std::lock_guard lock(settle_mu_);
    if (future_) return future_;
    future_ = new_future();
    if (settled_) {
      std::lock_guard base(mutex_);
      if (exception_)
        future_->setError(exception_);
      else
        future_->markCompleted(c10::IValue(tensors_));
      return future_;
    }
  }
  if (auto completer = completer_.lock()) {
    completer->add(c10::intrusive_ptr<PointToPointWork>::reclaim_copy(this));
  } else {
    settle(std::nullopt);
  }
  return future_;
}

// ---- the process group -----------------------------------------------------------

class ProcessGroupCollie final : public c10d::ProcessGroup {
 public:
  ProcessGroupCollie(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout)
      : c10d::ProcessGroup(rank, size), pg_(join(store, rank, size, timeout)) {
    completer_ = std::make_shared<Completer>();
    runner_ = std::make_shared<Runner>();
    worker_ = std::thread([runner = runner_] { runner->loop(); });
  }

  ~ProcessGroupCollie() override {
    runner_->stop();
    // Python drops the group holding the GIL; the worker finishing its
    // queue drops tensors, which may need the GIL to free their Python
    // objects: wait without it.
    auto finish = [&] {
      if (worker_.joinable()) worker_.join();
      completer_.reset();
    };
    if (Py_IsInitialized() && PyGILState_Check()) {
      pybind11::gil_scoped_release unlocked;
      finish();
    } else {
      finish();
    }
  }

  const std::string getBackendName() const override { return "collie"; }

  // What carries this group's messages ("tcp on 127.0.0.1:41234", ...).
  std::string describe() const { return pg_.describe_transport(); }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    const auto& t = single(tensors, "broadcast");
    const auto dtype = check_tensor(t, "broadcast");
    check_root(opts.rootRank, "broadcast");
    const int root = static_cast<int>(opts.rootRank);
    return collective(c10d::OpType::BROADCAST, {t}, [=, this] {
      pg_.run_collective(collie::Collective::Broadcast, dtype, t.data_ptr(), t.data_ptr(),
                         count_of(t), collie::ReduceOp::Sum, root, options_for(opts.timeout),
                         false);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    const auto& t = single(tensors, "allreduce");
    const auto dtype = check_tensor(t, "allreduce");
    const auto op = op_of(opts.reduceOp);
    return collective(c10d::OpType::ALLREDUCE, {t}, [=, this] {
      pg_.run_collective(collie::Collective::AllReduce, dtype, t.data_ptr(), t.data_ptr(),
                         count_of(t), op, 0, options_for(opts.timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    std::vector<collie::DataType> dtypes;
    for (const auto& t : tensors)
      dtypes.push_back(check_tensor(t, "allreduce_coalesced"));
    const auto op = op_of(opts.reduceOp);
    return collective(c10d::OpType::ALLREDUCE_COALESCED, tensors, [=, this] {
      for (std::size_t i = 0; i < tensors.size(); ++i)
        pg_.run_collective(collie::Collective::AllReduce, dtypes[i], tensors[i].data_ptr(),
                           tensors[i].data_ptr(), count_of(tensors[i]), op, 0,
                           options_for(opts.timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override {
    const auto& t = single(tensors, "reduce");
    const auto dtype = check_tensor(t, "reduce");
    const auto op = op_of(opts.reduceOp);
    check_root(opts.rootRank, "reduce");
    const int root = static_cast<int>(opts.rootRank);
    return collective(c10d::OpType::REDUCE, {t}, [=, this] {
      pg_.run_collective(collie::Collective::Reduce, dtype, t.data_ptr(), t.data_ptr(),
                         count_of(t), op, root, options_for(opts.timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    const auto& in = single(inputs, "allgather");
    const auto dtype = check_tensor(in, "allgather");
    TORCH_CHECK(outputs.size() == 1, "collie: allgather: one list of outputs, please");
    auto outs = outputs.front();
    TORCH_CHECK(static_cast<int>(outs.size()) == getSize(), "collie: allgather: ", outs.size(),
                " output tensors for ", getSize(), " ranks");
    std::vector<std::size_t> counts;
    for (const auto& o : outs) {
      TORCH_CHECK(o.scalar_type() == in.scalar_type(), "collie: allgather: an output of dtype ",
                  o.scalar_type(), " for an input of ", in.scalar_type());
      counts.push_back(count_of(o));
    }
    TORCH_CHECK(counts[static_cast<std::size_t>(getRank())] == count_of(in),
                "collie: allgather: this rank's output has ", counts[static_cast<std::size_t>(getRank())],
                " elements but its input ", count_of(in));
    const bool equal = std::all_of(counts.begin(), counts.end(),
                                   [&](std::size_t c) { return c == counts.front(); });
    const auto timeout = opts.timeout;
    return collective(c10d::OpType::ALLGATHER, outs, [=, this] {
      const auto total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      auto flat = at::empty({static_cast<std::int64_t>(total)}, in.options());
      if (equal) {
        pg_.run_collective(collie::Collective::AllGather, dtype, in.data_ptr(), flat.data_ptr(),
                           count_of(in), collie::ReduceOp::Sum, 0, options_for(timeout), false);
      } else {
        const std::size_t own = count_of(in);
        pg_.run_vector_collective(collie::Collective::AllGather, dtype, in.data_ptr(),
                                  std::span(&own, 1), flat.data_ptr(), counts, 0,
                                  options_for(timeout), false);
      }
      unflatten(flat, outs);
    });
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    const auto dtype = check_tensor(input, "_allgather_base");
    check_tensor(output, "_allgather_base");
    check_same_dtype(input, output, "_allgather_base");
    TORCH_CHECK(count_of(output) == count_of(input) * static_cast<std::size_t>(getSize()),
                "collie: _allgather_base: the output has ", count_of(output),
                " elements; it must hold the world size times the input's ", count_of(input));
    return collective(c10d::OpType::_ALLGATHER_BASE, {output}, [=, this] {
      pg_.run_collective(collie::Collective::AllGather, dtype, input.data_ptr(),
                         output.data_ptr(), count_of(input), collie::ReduceOp::Sum, 0,
                         options_for(opts.timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override {
    const auto& in = single(inputs, "gather");
    const auto dtype = check_tensor(in, "gather");
    check_root(opts.rootRank, "gather");
    const int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> outs;
    if (getRank() == root) {
      TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs.front().size()) == getSize(),
                  "collie: gather: the root needs one list of ", getSize(), " output tensors");
      outs = outputs.front();
      for (const auto& o : outs)
        TORCH_CHECK(count_of(o) == count_of(in) && o.scalar_type() == in.scalar_type(),
                    "collie: gather: every output must have the input's size and dtype");
    } else {
      TORCH_CHECK(outputs.empty() || outputs.front().empty(),
                  "collie: gather: only the root passes output tensors");
    }
    const auto timeout = opts.timeout;
    return collective(c10d::OpType::GATHER, outs, [=, this] {
      at::Tensor flat;
      if (getRank() == root)
        flat = at::empty({static_cast<std::int64_t>(count_of(in)) * getSize()}, in.options());
      pg_.run_collective(collie::Collective::Gather, dtype, in.data_ptr(),
                         flat.defined() ? flat.data_ptr() : nullptr, count_of(in),
                         collie::ReduceOp::Sum, root, options_for(timeout), false);
      if (flat.defined()) unflatten(flat, outs);
    });
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    const auto& out = single(outputs, "scatter");
    const auto dtype = check_tensor(out, "scatter");
    check_root(opts.rootRank, "scatter");
    const int root = static_cast<int>(opts.rootRank);
    std::vector<at::Tensor> ins;
    if (getRank() == root) {
      TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs.front().size()) == getSize(),
                  "collie: scatter: the root needs one list of ", getSize(), " input tensors");
      ins = inputs.front();
      for (const auto& i : ins)
        TORCH_CHECK(count_of(i) == count_of(out) && i.scalar_type() == out.scalar_type(),
                    "collie: scatter: every input must have the output's size and dtype");
    } else {
      TORCH_CHECK(inputs.empty() || inputs.front().empty(),
                  "collie: scatter: only the root passes input tensors");
    }
    const auto timeout = opts.timeout;
    return collective(c10d::OpType::SCATTER, {out}, [=, this] {
      at::Tensor flat;
      if (getRank() == root) flat = flatten(ins);
      pg_.run_collective(collie::Collective::Scatter, dtype,
                         flat.defined() ? flat.data_ptr() : nullptr, out.data_ptr(),
                         count_of(out), collie::ReduceOp::Sum, root, options_for(timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    const auto& out = single(outputs, "reduce_scatter");
    const auto dtype = check_tensor(out, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs.front().size()) == getSize(),
                "collie: reduce_scatter: one list of ", getSize(), " input tensors, please");
    auto ins = inputs.front();
    for (const auto& i : ins)
      TORCH_CHECK(count_of(i) == count_of(out) && i.scalar_type() == out.scalar_type(),
                  "collie: reduce_scatter: every input must have the output's size and dtype");
    const auto op = op_of(opts.reduceOp);
    const auto timeout = opts.timeout;
    return collective(c10d::OpType::REDUCE_SCATTER, {out}, [=, this] {
      const auto flat = flatten(ins);
      pg_.run_collective(collie::Collective::ReduceScatter, dtype, flat.data_ptr(),
                         out.data_ptr(), count_of(out), op, 0, options_for(timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    const auto dtype = check_tensor(output, "_reduce_scatter_base");
    check_tensor(input, "_reduce_scatter_base");
    check_same_dtype(output, input, "_reduce_scatter_base");
    TORCH_CHECK(count_of(input) == count_of(output) * static_cast<std::size_t>(getSize()),
                "collie: _reduce_scatter_base: the input has ", count_of(input),
                " elements; it must hold the world size times the output's ", count_of(output));
    const auto op = op_of(opts.reduceOp);
    return collective(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, [=, this] {
      pg_.run_collective(collie::Collective::ReduceScatter, dtype, input.data_ptr(),
                         output.data_ptr(), count_of(output), op, 0, options_for(opts.timeout),
                         false);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override {
    const auto dtype = check_tensor(input, "alltoall_base");
    check_tensor(output, "alltoall_base");
    check_same_dtype(input, output, "alltoall_base");
    const auto n = static_cast<std::size_t>(getSize());
    const auto timeout = opts.timeout;
    if (output_splits.empty() && input_splits.empty()) {
      TORCH_CHECK(count_of(input) == count_of(output) && count_of(input) % n == 0,
                  "collie: alltoall_base: input and output of ", count_of(input), " and ",
                  count_of(output), " elements: both must hold ", n, " equal blocks");
      return collective(c10d::OpType::ALLTOALL_BASE, {output}, [=, this] {
        pg_.run_collective(collie::Collective::AllToAll, dtype, input.data_ptr(),
                           output.data_ptr(), count_of(input) / n, collie::ReduceOp::Sum, 0,
                           options_for(timeout), false);
      });
    }
    // Splits count rows of dimension 0; an empty list means equal splits.
    auto counts = [&](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
      const std::size_t rows = t.dim() == 0 ? 1 : static_cast<std::size_t>(t.size(0));
      const std::size_t row = rows == 0 ? 0 : count_of(t) / rows;
      std::vector<std::size_t> out(n);
      if (splits.empty()) {
        TORCH_CHECK(rows % n == 0, "collie: alltoall_base: ", rows, " rows of the ", which,
                    " do not split into ", n, " equal parts");
        for (auto& c : out) c = rows / n * row;
        return out;
      }
      TORCH_CHECK(splits.size() == n, "collie: alltoall_base: ", splits.size(), " ", which,
                  " splits for ", n, " ranks");
      std::size_t sum = 0;
      for (std::size_t j = 0; j < n; ++j) {
        TORCH_CHECK(splits[j] >= 0, "collie: alltoall_base: a negative split");
        out[j] = static_cast<std::size_t>(splits[j]) * row;
        sum += static_cast<std::size_t>(splits[j]);
      }
      TORCH_CHECK(sum == rows, "collie: alltoall_base: the ", which, " splits add up to ", sum,
                  " rows but it has ", rows);
      return out;
    };
    const auto send = counts(input, input_splits, "input");
    const auto recv = counts(output, output_splits, "output");
    return collective(c10d::OpType::ALLTOALL_BASE, {output}, [=, this] {
      pg_.run_vector_collective(collie::Collective::AllToAll, dtype, input.data_ptr(), send,
                                output.data_ptr(), recv, 0, options_for(timeout), false);
    });
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    const auto n = static_cast<std::size_t>(getSize());
    TORCH_CHECK(outputs.size() == n && inputs.size() == n, "collie: alltoall: ", inputs.size(),
                " inputs and ", outputs.size(), " outputs for ", n, " ranks");
    const auto dtype = check_tensor(inputs.front(), "alltoall");
    std::vector<std::size_t> send, recv;
    for (std::size_t j = 0; j < n; ++j) {
      check_tensor(inputs[j], "alltoall");
      check_tensor(outputs[j], "alltoall");
      TORCH_CHECK(inputs[j].scalar_type() == inputs.front().scalar_type() &&
                      outputs[j].scalar_type() == inputs.front().scalar_type(),
                  "collie: alltoall: every tensor must have the same dtype");
      send.push_back(count_of(inputs[j]));
      recv.push_back(count_of(outputs[j]));
    }
    const auto timeout = opts.timeout;
    return collective(c10d::OpType::ALLTOALL, outputs, [=, this] {
      const auto in = flatten(inputs);
      const auto total = std::accumulate(recv.begin(), recv.end(), std::size_t{0});
      auto out = at::empty({static_cast<std::int64_t>(total)}, inputs.front().options());
      pg_.run_vector_collective(collie::Collective::AllToAll, dtype, in.data_ptr(), send,
                                out.data_ptr(), recv, 0, options_for(timeout), false);
      unflatten(out, outputs);
    });
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    return collective(c10d::OpType::BARRIER, {},
                      [=, this] { pg_.barrier(options_for(opts.timeout)); });
  }

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                      int tag) override {
    const auto& t = single(tensors, "send");
    check_tensor(t, "send");
    check_root(dst, "send to");
    auto work = pg_.isend(t.data_ptr(), t.nbytes(), dst, tag);
    return c10::make_intrusive<PointToPointWork>(getRank(), c10d::OpType::SEND,
                                                 std::vector<at::Tensor>{t}, std::move(work),
                                                 completer_);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                      int tag) override {
    const auto& t = single(tensors, "recv");
    check_tensor(t, "recv");
    check_root(src, "recv from");
    auto work = pg_.irecv(t.data_ptr(), t.nbytes(), src, tag);
    return c10::make_intrusive<PointToPointWork>(getRank(), c10d::OpType::RECV,
                                                 std::vector<at::Tensor>{t}, std::move(work),
                                                 completer_);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override {
    const auto& t = single(tensors, "recv");
    check_tensor(t, "recv");
    auto work = pg_.irecv_any(t.data_ptr(), t.nbytes(), tag);
    return c10::make_intrusive<PointToPointWork>(getRank(), c10d::OpType::RECVANYSOURCE,
                                                 std::vector<at::Tensor>{t}, std::move(work),
                                                 completer_);
  }

 private:
  static collie::ProcessGroup join(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                   int size, std::chrono::milliseconds timeout) {
    const auto id = identify(store);
    collie::InitOptions o;
    o.store = std::make_shared<TorchStore>(store);
    o.store_name = id.name;
    o.route_to = id.host;
    o.rank = rank;
    o.world_size = size;
    if (timeout.count() > 0) o.timeout = timeout;
    return collie::init(o);
  }

  void check_root(std::int64_t r, const char* what) const {
    TORCH_CHECK(r >= 0 && r < getSize(), "collie: ", what, " rank ", r,
                ": the group has ranks 0 to ", getSize() - 1);
  }

  static at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
    std::vector<at::Tensor> flat;
    for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
    return at::cat(flat);
  }
  static void unflatten(const at::Tensor& flat, const std::vector<at::Tensor>& outputs) {
    std::int64_t at_ = 0;
    for (const auto& o : outputs) {
      const auto n = o.numel();
      o.copy_(flat.narrow(0, at_, n).view(o.sizes()));
      at_ += n;
    }
  }

  // Queues a collective; its Work completes when it ran.
  c10::intrusive_ptr<c10d::Work> collective(c10d::OpType type, std::vector<at::Tensor> outputs,
                                            std::function<void()> run) {
    auto work = c10::make_intrusive<CollectiveWork>(getRank(), type, std::move(outputs), runner_);
    runner_->post({std::move(run), work});
    return work;
  }

  collie::ProcessGroup pg_;
  std::shared_ptr<Completer> completer_;
  std::shared_ptr<Runner> runner_;
  std::thread worker_;  // last: started when the rest is ready
};

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
