// The task queue of async collectives and torch calls (async_runner.hpp).
#include "async_runner.hpp"

namespace collie {

AsyncRunner::~AsyncRunner() {
  stop();
  if (thread_.joinable()) thread_.join();
}

bool AsyncRunner::post(Task task, Ticket* ticket) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  const Ticket t = next_ticket_++;
  if (ticket != nullptr) *ticket = t;
  queue_.push_back({t, std::move(task)});
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  cv_.notify_all();
  return true;
}

void AsyncRunner::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

void AsyncRunner::run_if_next(Ticket ticket) {
  Queued queued;
  {
    std::lock_guard lock(mu_);
    if (busy_ || queue_.empty() || queue_.front().ticket != ticket) return;
    queued = take();
  }
  execute(queued);
}

AsyncRunner::Queued AsyncRunner::take() {
  busy_ = true;
  Queued queued = std::move(queue_.front());
  queue_.pop_front();
  return queued;
}

void AsyncRunner::execute(Queued& queued) {
  queued.task.run();
  queued.task.run = nullptr;  // its captures go before the next task runs
  {
    std::lock_guard lock(mu_);
    busy_ = false;
  }
  cv_.notify_all();
  if (queued.task.finish) queued.task.finish();
}

void AsyncRunner::loop() {
  for (;;) {
    Queued queued;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !busy_ && (!queue_.empty() || stopping_); });
      if (queue_.empty()) return;  // stopping, and nothing left to run
      queued = take();
    }
    execute(queued);
  }
}

}  // namespace collie
