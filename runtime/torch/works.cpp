// torch's Work for collie's calls (works.hpp).
#include "works.hpp"

#include <collie/transport/transport.hpp>

namespace collie_torch {

c10::intrusive_ptr<c10::ivalue::Future> new_future() {
  return c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors());
}

namespace {
// A Work's future, completed as the Work ended: its error, or its tensors.
void settle_future(c10::ivalue::Future& future, const std::exception_ptr& error,
                   const std::vector<at::Tensor>& tensors) {
  if (error)
    future.setError(error);
  else
    future.markCompleted(c10::IValue(tensors));
}
}  // namespace

// ---- collectives ----

CollectiveWork::CollectiveWork(int rank, c10d::OpType type, const std::string& title,
                               std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                               std::weak_ptr<collie::AsyncRunner> runner,
                               std::weak_ptr<Completer> settler)
    : c10d::Work(rank, type, title.c_str(), std::move(inputs)),
      outputs_(std::move(outputs)),
      runner_(std::move(runner)),
      settler_(std::move(settler)) {}

bool CollectiveWork::wait(std::chrono::milliseconds timeout) {
  const auto ticket = ticket_.load();
  if (ticket != kNoTicket)
    if (auto runner = runner_.lock()) runner->run_if_next(ticket);
  return c10d::Work::wait(timeout);
}

c10::intrusive_ptr<c10::ivalue::Future> CollectiveWork::getFuture() {
  std::lock_guard lock(future_mu_);
  if (future_) return future_;
  future_ = new_future();
  if (done_) settle_future(*future_, error_, outputs_);
  return future_;
}

void CollectiveWork::complete() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  {
    std::lock_guard lock(future_mu_);
    done_ = true;
    future = future_;
  }
  if (future) {
    // Its callbacks may wait for a later call, which the runner's thread
    // runs: not on that thread.
    // (Not by locking the runner: its last owner would then be this very
    // thread, which its destructor would join.)
    const auto settler = settler_.lock();
    if (settler && collie::AsyncRunner::on_runner_thread())
      settler->add([future, error = error_, outputs = outputs_] {
        settle_future(*future, error, outputs);
      });
    else
      settle_future(*future, error_, outputs_);
  }
  finish(error_);
}

// ---- sends and receives ----

PointToPointWork::PointToPointWork(int rank, c10d::OpType type, const std::string& title,
                                   std::vector<at::Tensor> tensors, collie::Work work,
                                   std::weak_ptr<Completer> completer,
                                   std::shared_ptr<const GroupNames> names)
    : c10d::Work(rank, type, title.c_str(), tensors),
      tensors_(std::move(tensors)),
      work_(std::move(work)),
      completer_(std::move(completer)),
      names_(std::move(names)) {}

bool PointToPointWork::isCompleted() {
  {
    std::lock_guard lock(settle_mu_);
    if (settled_) return true;
    if (!work_.is_completed()) return false;
  }
  settle(std::nullopt);
  return true;
}

bool PointToPointWork::wait(std::chrono::milliseconds timeout) {
  settle(timeout == kNoTimeout ? std::nullopt : std::optional(timeout));
  std::lock_guard lock(mutex_);
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

int PointToPointWork::sourceRank() const {
  std::lock_guard lock(settle_mu_);
  return source_;
}

void PointToPointWork::settle(std::optional<std::chrono::milliseconds> timeout) {
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
    error = names_->rewrite(std::current_exception());
  }
  settled_ = true;
  if (future_) settle_future(*future_, error, tensors_);
  finish(error);
}

c10::intrusive_ptr<c10::ivalue::Future> PointToPointWork::getFuture() {
  {
    std::lock_guard lock(settle_mu_);
    if (future_) return future_;
    future_ = new_future();
    if (settled_) {
      std::lock_guard base(mutex_);
      settle_future(*future_, exception_, tensors_);
      return future_;
    }
  }
  if (auto completer = completer_.lock()) {
    completer->add([work = c10::intrusive_ptr<PointToPointWork>::reclaim_copy(this)] {
      work->settle(std::nullopt);
    });
  } else {
    settle(std::nullopt);
  }
  return future_;
}

// ---- the completer ----

Completer::Completer(Threads threads) : state_(std::make_shared<State>(threads)) {}

Completer::~Completer() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    threads.swap(state_->started);
  }
  state_->cv.notify_all();
  for (auto& t : threads) {
    if (t.get_id() == std::this_thread::get_id())
      t.detach();  // this job's own thread: it ends after the job, on the state it holds
    else
      t.join();
  }
}

void Completer::add(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mu);
    state_->queue.push_back(std::move(job));
    const bool none = state_->started.empty();
    if (none || (state_->threads == Threads::AsNeeded &&
                 state_->idle < static_cast<int>(state_->queue.size())))
      state_->started.emplace_back([state = state_] { loop(state); });
  }
  state_->cv.notify_one();
}

void Completer::loop(const std::shared_ptr<State>& state) {
  // Beside torch's thread, which may share its processor: its waits yield
  // to it (transport.hpp).
  collie::transport::set_waits_for_others(true);
  for (;;) {
    std::function<void()> next;
    {
      std::unique_lock lock(state->mu);
      ++state->idle;
      state->cv.wait(lock, [&] { return state->stopping || !state->queue.empty(); });
      --state->idle;
      if (state->queue.empty()) return;
      next = std::move(state->queue.front());
      state->queue.pop_front();
    }
    next();
  }
}

}  // namespace collie_torch
