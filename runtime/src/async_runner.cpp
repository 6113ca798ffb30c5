// The task queue of async collectives and torch calls (async_runner.hpp).
#include <collie/async_runner.hpp>
#include <collie/transport/transport.hpp>

namespace collie {

AsyncRunner::~AsyncRunner() {
  stop();  // (no post adds a thread after this)
  for (auto& thread : threads_)
    thread.join();
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
  // A thread for it where ours free are fewer than the tasks queued for
  // them, and more may run.
  if (static_cast<std::size_t>(threads_free_) < queue_.size() &&
      static_cast<int>(threads_.size()) < width_) {
    ++threads_free_;
    threads_.emplace_back([this] { loop(); });
  }
  const bool backed_off = behind && look_ > grace_;  // the thread may sleep that long
  if (behind) look_ = grace_;
  if (grace_.count() == 0 || idle_ > 0 || backed_off) cv_.notify_all();
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
    if (!may_start() || queue_.front().ticket != ticket) return;
    queued = take();
  }
  execute(queued, false);
}

bool AsyncRunner::may_start() const {
  return !queue_.empty() && running_ < width_;
}

AsyncRunner::Queued AsyncRunner::take() {
  ++running_;
  Queued queued = std::move(queue_.front());
  queue_.pop_front();
  return queued;
}

void AsyncRunner::execute(Queued& queued, bool own_thread) {
  queued.task.run();
  queued.task.run = nullptr;  // its captures go before the next task runs
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    --running_;
    if (own_thread) ++threads_free_;
    // With a grace period the threads, unless asleep with nothing to do,
    // look again by themselves.
    wake = grace_.count() == 0 || stopping_ || (idle_ > 0 && !queue_.empty());
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
        if (may_start()) {
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
          ++idle_;
          cv_.wait(lock);
          --idle_;
        }
      }
      queued = take();
      --threads_free_;
      look_ = grace_;  // nobody waited for this one: look at the grace period's pace
    }
    execute(queued, true);
  }
}

}  // namespace collie
