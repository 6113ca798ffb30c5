// The master's side of a master-worker run (master_worker.hpp): the
// operations in flight on each worker, the thread that takes the workers'
// completions, and how an operation is submitted.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <collie/master_worker.hpp>
#include <collie/store/store.hpp>
#include <collie/transport/transport.hpp>

#include "wire.hpp"

namespace collie::mw::detail {

// The lock and condition every event of one run waits on.
struct Sync {
  std::mutex mu;
  std::condition_variable cv;
  // The stall watch's last word on each worker that has kept operations
  // waiting (stall_watch.cpp), for a wait that times out to quote.
  std::map<int, std::string> stall_reports;
  // How long a wait with no time of its own waits (Options::timeout).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

struct OpState {
  std::shared_ptr<Sync> sync;
  std::string what;  // "fill(float32[1024] #3) on worker 1"
  int worker = 0;    // the (first) worker it runs on
  int parts = 1;     // workers still to report (guarded by sync->mu)
  bool done = false;
  bool connection = false;  // the error is a worker's death
  std::string error;
  double value = 0;
  std::shared_ptr<void> keep;  // what a read fills, for its Future
};

struct BufferState {
  std::weak_ptr<MasterState> master;
  int worker = 0;
  std::uint64_t id = 0;
  DataType dtype = DataType::Float32;
  std::size_t count = 0;
  int device = -1;
  bool queued = false;  // its alloc was queued: only then is there anything to free
  ~BufferState();  // frees it on its worker (after what was queued on it)
};

// One worker's share of an operation.
struct Part {
  explicit Part(std::shared_ptr<OpState> o) : op(std::move(o)) {}
  std::shared_ptr<OpState> op;
  void* read_into = nullptr;              // a read's target on the master,
  std::size_t read_bytes = 0;             // received into from the call on:
  transport::RequestPtr data;             // the read's receive
  const void* write_data = nullptr;       // a large write's data, sent when asked
  std::size_t write_bytes = 0;
  transport::RequestPtr write_send;
};

// The master's link to one worker.
struct Link {
  int rank = 0;
  std::string name;     // "worker 2 (rank 2 at 10.0.0.5:41234)"
  std::string failure;  // set once it died: every later call throws it
  std::uint64_t next_seq = 1;
  std::map<std::uint64_t, Part> pending;
  // Commands being sent: their bytes live here until the send finished.
  struct Sent {
    std::unique_ptr<wire::Command> command;
    std::vector<std::byte> body;
    transport::RequestPtr command_send, body_send;
  };
  std::deque<Sent> sends;
  // The receives the completion thread keeps posted.
  wire::CompletionsHeader done_header;
  transport::RequestPtr done_recv;
  std::uint64_t ready_seq = 0;
  transport::RequestPtr ready_recv;
  // The stall watch: when the worker last finished something (or was
  // given work while idle), and how many reports it has had since.
  std::chrono::steady_clock::time_point last_news{};
  int stall_rounds = 0;
};

struct MasterState : std::enable_shared_from_this<MasterState> {
  // `store` (may be null) holds the ranks' process identities (stall.hpp)
  // for the stall watch, which reports after `stall_time` (0: never).
  MasterState(std::shared_ptr<transport::Transport> t, const Kernels& k, Options o,
              store::Store* store, std::chrono::milliseconds stall_time);
  ~MasterState();

  std::shared_ptr<transport::Transport> transport;
  store::Store* store;
  std::chrono::milliseconds stall_time;
  const Kernels& kernels;
  Options options;
  std::shared_ptr<Sync> sync = std::make_shared<Sync>();
  std::vector<Link> links;  // [rank - 1]
  // One submission at a time, so that every worker sees operations that
  // span several (copies, collectives) in one order.
  std::mutex submit_mu;
  std::uint64_t next_buffer = 1, next_copy = 1;
  bool closed = false;  // after shutdown: handles dropped later free nothing
  std::thread completions;
  bool stopping = false;

  Link& link(int worker);  // ArgumentError for a rank that is not a worker
  std::shared_ptr<OpState> new_op(std::string what, int parts);
  // Queues `c` (and its body) on `worker` as a part of `op`. Throws
  // ConnectionError when the worker has died, TimeoutError when its window
  // stays full past the timeout. Call with submit_mu held.
  void submit(int worker, wire::Command c, std::vector<std::byte> body, Part part);
  // Queues the whole of an operation on one worker: submit() under the
  // submit lock, `op` its one part (with `part`'s memory, for a read or a
  // large write); the second form makes the operation from `what`.
  Event queue(int worker, const wire::Command& c, std::shared_ptr<OpState> op,
              std::vector<std::byte> body = {}, Part part = Part{nullptr});
  Event queue(int worker, const wire::Command& c, std::string what,
              std::vector<std::byte> body = {}, Part part = Part{nullptr});
  // Frees a buffer (BufferState's destructor); never throws.
  void release(int worker, std::uint64_t id) noexcept;
  // Waits for every operation in flight. Throws TimeoutError naming each
  // worker that has finished nothing for the timeout with work queued (and
  // what the stall watch saw of it).
  void drain(const char* what);
  // Drains, sends Shutdown to each live worker and waits for their answers,
  // stops the completion thread and tells the workers to go; a worker that
  // never answers is named in the TimeoutError thrown after all that.
  void shutdown();
  void run_completions();  // the completion thread

  // (sync->mu held) The part of `op` for `seq` finished on its worker.
  void finish_part(OpState& op, bool failed, bool connection, const std::string& error,
                   double value);
  void fail_worker(Link& l, const std::string& why);  // sync->mu held
  void post_receives(Link& l);
  void take_completions(Link& l);
  void take_ready(Link& l);
  // Names a worker that has finished nothing for the stall time with work
  // queued, and what /proc says of it (stall_watch.cpp). Completion thread.
  void watch_stalls();
  // "worker 2 (...) has finished nothing for 31 s with 3 operations queued
  // (the oldest: ...)"; sync->mu held.
  std::string stalled(const Link& l, std::chrono::steady_clock::time_point now) const;
  Event event(std::shared_ptr<OpState> op) { return Event(std::move(op)); }
  Buffer buffer(std::shared_ptr<BufferState> s) { return Buffer(std::move(s)); }
};

// "fill", "all_reduce", ...
const char* op_name(wire::Op op);

}  // namespace collie::mw::detail
