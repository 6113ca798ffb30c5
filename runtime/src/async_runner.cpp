// The task queue of async collectives and torch calls (async_runner.hpp).
#include <collie/async_runner.hpp>
#include <collie/transport/transport.hpp>

namespace collie {

AsyncRunner::~AsyncRunner() {
  stop();
  if (thread_.joinable()) thread_.join();
}

namespace {
// With a grace period: the runner's thread sleeps without a deadline (a
// post must wake it) once nothing was posted for this long.
constexpr auto kActive = std::chrono::milliseconds(100);
// Meanwhile it looks at the queue once per grace period, twice as long
// after each look that found it empty (the callers run their tasks), up to
// this; a task it runs itself brings it back to the grace period.
constexpr auto kLongestLook = std::chrono::milliseconds(5);
}  // namespace

bool AsyncRunner::post(Task task, Ticket* ticket) {
  std::lock_guard lock(mu_);
  if (stopping_) return false;
  const Ticket t = next_ticket_++;
  if (ticket != nullptr) *ticket = t;
  last_post_ = Clock::now();
  // A task posted behind another that nobody has run: its caller did not
  // wait at once, so the thread looks again at the grace period's pace.
  const bool behind = !queue_.empty();
  queue_.push_back({t, std::move(task), last_post_});
  if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  const bool backed_off = behind && look_ > grace_;  // the thread may sleep that long
  if (behind) look_ = grace_;
  if (grace_.count() == 0 || idle_ || backed_off) cv_.notify_all();
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
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    busy_ = false;
    // With a grace period the thread, unless asleep with nothing to do,
    // looks again by itself.
    wake = grace_.count() == 0 || stopping_ || (idle_ && !queue_.empty());
  }
  if (wake) cv_.notify_all();
  if (queued.task.finish) queued.task.finish();
}

namespace {
thread_local bool runner_thread = false;  // this thread is a runner's own
}  // namespace

bool AsyncRunner::on_runner_thread() {
  return runner_thread;
}

void AsyncRunner::loop() {
  runner_thread = true;
  // It waits while the caller's thread goes on, perhaps on the same
  // processor: its waits yield (transport.hpp).
  transport::set_waits_for_others(true);
  for (;;) {
    Queued queued;
    {
      std::unique_lock lock(mu_);
      for (;;) {
        const auto now = Clock::now();
        if (!busy_ && !queue_.empty()) {
          const auto due = queue_.front().posted + grace_;
          if (grace_.count() == 0 || stopping_ || now >= due) break;
          cv_.wait_until(lock, due);  // its caller may run it meanwhile
          continue;
        }
        if (queue_.empty() && stopping_) return;  // nothing left to run
        if (grace_.count() > 0 && now < last_post_ + kActive) {
          cv_.wait_for(lock, look_);
          if (queue_.empty())
            look_ = std::min<std::chrono::microseconds>(look_ * 2, kLongestLook);
        } else {
          idle_ = true;
          cv_.wait(lock);
          idle_ = false;
        }
      }
      queued = take();
      look_ = grace_;  // nobody waited for this one: look at the grace period's pace
    }
    execute(queued);
  }
}

}  // namespace collie
