// A queue of tasks started in the order posted, up to `width` at once
// (public, so that bindings built on the runtime share it): a group's async
// collectives (work.hpp's run_async; group.hpp says how many at once), and
// the torch backend's calls (runtime/torch/, one at a time). Each task runs
// on one of the runner's own threads (as many as run at once, started as
// needed), or in a thread that waits for it while it is at the head of the
// queue and a place is free (run_if_next): a caller that waits at once
// saves waking the runner's thread and being woken by it. With a width of
// 1, one at a time, in order.
//
// With a grace period, the runner's thread leaves a task alone until it
// was queued that long, so that a caller that waits at once runs it
// itself, and its posts and its own calls wake that thread only when it
// sleeps with nothing to do (after 100 ms without a post) or when a task is
// posted behind one nobody ran; in between it looks at the queue once per
// grace period, backing off to once per 5 ms while each look finds the
// queue empty (every caller runs its own). The torch backend's calls are
// waited for at once but for async ones: on a host with more ranks than
// processors, waking the thread at each post let it take the call and
// hand it back, two wake-ups on the call's path, and looking every 500 us
// cost 8 ranks on 2 cores a third of each small call (388 us against 250-294).
//
// A task has two parts: `run`, then `finish`, called once its place in the
// runner is free again and `run`'s captures are gone (so a caller woken by
// `finish` may run the next task itself, and the previous task's buffers
// are released before it). Neither may throw. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace collie {

class AsyncRunner {
 public:
  using Ticket = std::uint64_t;
  struct Task {
    std::function<void()> run;
    std::function<void()> finish;  // may be empty
  };

  // grace: how long a task queued waits for its caller before the runner's
  // thread runs it (0: at once). width: how many tasks run at once (at
  // least 1).
  explicit AsyncRunner(std::chrono::microseconds grace = {}, int width = 1)
      : grace_(grace), width_(width < 1 ? 1 : width) {}
  // Runs what was queued, then joins. stop() first refuses new tasks.
  ~AsyncRunner();
  AsyncRunner(const AsyncRunner&) = delete;
  AsyncRunner& operator=(const AsyncRunner&) = delete;

  // Queues `task`; false (and nothing queued) once stop() was called.
  bool post(Task task, Ticket* ticket = nullptr);
  // Runs task `ticket` in this thread if it is next and nothing runs.
  void run_if_next(Ticket ticket);
  // Takes no more tasks; those queued still run.
  void stop();
  // Whether the calling thread is a runner's own (which runs tasks no
  // caller took): code it runs must not wait for a later task.
  static bool on_runner_thread();

 private:
  using Clock = std::chrono::steady_clock;
  struct Queued {
    Ticket ticket;
    Task task;
    Clock::time_point posted;
  };
  bool may_start() const;  // the head of the queue may start now (mu_ held)
  Queued take();            // mu_ held
  void execute(Queued& queued, bool own_thread);
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  Ticket next_ticket_ = 0;
  int running_ = 0;       // tasks running now, on any thread
  int threads_free_ = 0;  // own threads not running a task
  bool stopping_ = false;
  const std::chrono::microseconds grace_;
  const int width_;
  int idle_ = 0;                             // own threads asleep until woken (mu_)
  std::chrono::microseconds look_ = grace_;  // their next look, in so long (mu_)
  Clock::time_point last_post_;              // (mu_)
  std::vector<std::thread> threads_;         // started as posts need them
};

}  // namespace collie
