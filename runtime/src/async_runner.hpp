// A queue of tasks run one at a time, in the order posted: a group's async
// collectives (work.hpp's run_async), and the torch backend's calls
// (runtime/torch/). Each task runs on the runner's own thread (started by
// the first post), or in a thread that waits for it while it is at the head
// of the queue and nothing runs (run_if_next): a caller that waits at once
// saves waking the runner's thread and being woken by it.
//
// A task has two parts: `run`, then `finish`, called once the runner is
// free again and `run`'s captures are gone (so a caller woken by `finish`
// may run the next task itself, and the previous task's buffers are
// released before it). Neither may throw. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace collie {

class AsyncRunner {
 public:
  using Ticket = std::uint64_t;
  struct Task {
    std::function<void()> run;
    std::function<void()> finish;  // may be empty
  };

  AsyncRunner() = default;
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

 private:
  struct Queued {
    Ticket ticket;
    Task task;
  };
  Queued take();  // mu_ held
  void execute(Queued& queued);
  void loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  Ticket next_ticket_ = 0;
  bool busy_ = false;
  bool stopping_ = false;
  std::thread thread_;  // started by the first post
};

}  // namespace collie
