// torch's Work for collie's calls: how a torch program waits for them.
//
// A collective runs on its group's AsyncRunner (runtime/include/collie/async_runner.hpp),
// one at a time in call order, with collie's blocking call: on the runner's
// thread, or in the thread that waits for it while it is next and nothing
// runs (torch's blocking calls wait at once); its Work completes (and its
// future is marked) when the call returned. A send or receive is posted at
// once (collie's isend/irecv/irecv_any: a receive never blocks a later send
// of the same process) and completes in whichever thread waits; its future
// is completed by a Completer thread, started the first time one is asked
// for. collie's errors reach Python as RuntimeError with collie's message.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <collie/process_group.hpp>

#include <collie/async_runner.hpp>

#include "group_names.hpp"

namespace collie_torch {

c10::intrusive_ptr<c10::ivalue::Future> new_future();

class Completer;

// A collective: completed when its call returned, on the runner's thread or
// in a thread that waited for it first.
class CollectiveWork final : public c10d::Work {
 public:
  // `title` ("collie:all_reduce") and `inputs` are the profiler's (torch's
  // RecordFunction, as gloo's Works record theirs).
  // `settler` completes its future where the runner's own thread ran it.
  CollectiveWork(int rank, c10d::OpType type, const std::string& title,
                 std::vector<at::Tensor> inputs, std::vector<at::Tensor> outputs,
                 std::weak_ptr<collie::AsyncRunner> runner, std::weak_ptr<Completer> settler);

  bool wait(std::chrono::milliseconds timeout) override;
  std::vector<at::Tensor> result() override { return outputs_; }
  // Made when first asked for (torch's blocking calls never ask).
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Its place in the runner's queue, once posted.
  void set_ticket(collie::AsyncRunner::Ticket ticket) { ticket_.store(ticket); }
  // The call's error, set by the task that runs it, before complete().
  void fail(std::exception_ptr error) { error_ = std::move(error); }
  void complete();

 private:
  static constexpr auto kNoTicket = ~collie::AsyncRunner::Ticket{0};
  std::vector<at::Tensor> outputs_;
  std::exception_ptr error_;
  std::mutex future_mu_;
  bool done_ = false;  // complete() ran (under future_mu_)
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<collie::AsyncRunner> runner_;
  std::weak_ptr<Completer> settler_;
  std::atomic<collie::AsyncRunner::Ticket> ticket_{kNoTicket};
};

// A send or receive: collie's Work, waited on by whoever asks.
class PointToPointWork final : public c10d::Work {
 public:
  // `title`: the profiler's ("collie:send"), as CollectiveWork's.
  // `names` rewrites its error to name the group's ranks (group_names.hpp).
  PointToPointWork(int rank, c10d::OpType type, const std::string& title,
                   std::vector<at::Tensor> tensors, collie::Work work,
                   std::weak_ptr<Completer> completer, std::shared_ptr<const GroupNames> names);

  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout) override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override { return tensors_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  // Waits for collie's Work (once: later calls see how it ended) and
  // completes this one and its future.
  void settle(std::optional<std::chrono::milliseconds> timeout);

 private:
  std::vector<at::Tensor> tensors_;
  mutable std::mutex settle_mu_;
  collie::Work work_;
  bool settled_ = false;
  int source_ = -1;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::weak_ptr<Completer> completer_;
  std::shared_ptr<const GroupNames> names_;
};

// Runs jobs on threads of its own, started by the first job. A group's
// point-to-point Works whose futures were asked for are settled on one
// (each waits for its message), in order. The futures of collectives that
// the runner's own thread completed are settled on another, which grows a
// thread whenever each of its threads is busy: a future's callbacks may
// wait for a later collective's future (PowerSGD's DDP hook does), whose
// settling must not queue behind them, nor take the runner's thread, which
// runs that collective.
//
// Its destructor may run on one of its own threads (a job drops the last
// reference to the group): that thread is left to end by itself, holding
// the state it needs.
class Completer {
 public:
  enum class Threads { One, AsNeeded };
  explicit Completer(Threads threads = Threads::One);
  ~Completer();
  void add(std::function<void()> job);

 private:
  struct State {
    explicit State(Threads t) : threads(t) {}
    const Threads threads;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> queue;
    bool stopping = false;
    int idle = 0;  // threads waiting for a job (mu)
    std::vector<std::thread> started;
  };
  static void loop(const std::shared_ptr<State>& state);
  std::shared_ptr<State> state_;
};

}  // namespace collie_torch
