// The process group: the ranks of a job, and the messages between them.
//
//   collie::ProcessGroup pg = collie::init();   // env://, as torchrun sets it
//   std::vector<float> v(1024);
//   if (pg.rank() == 0) pg.send(std::span(v), /*dst=*/1);
//   if (pg.rank() == 1) pg.recv(std::span(v), /*src=*/0);
//
// init() resolves the job from the environment (see job_config.hpp), opens
// the job's store (job_store.hpp), agrees on a random group id, starts the
// peer mesh (transport/mesh.hpp: each rank listens on the interface that
// routes to the master and publishes its address), and waits until every
// rank has joined. It throws collie::Error naming what to set or who is
// missing; it never hangs past the timeout (COLLIE_TIMEOUT, default 300 s).
//
// Point-to-point semantics:
// - send/recv block until the buffer may be reused (send: the bytes are
//   handed to the kernel or, to oneself, copied; recv: the message is in the
//   buffer). isend/irecv return at once with a Work; the buffer belongs to
//   collie until that Work completes.
// - A receive must name the exact size the sender sent; another size fails
//   the receive with a RequestError naming both sizes.
// - Between two ranks, messages with the same tag arrive in the order sent;
//   different tags are independent, so a receive for tag 2 can complete
//   before an earlier send with tag 1 is received.
// - Tags are 0 to 2^31 - 1. Sending to yourself works (the data is copied).
// - A peer that exits, crashes or resets its connection fails every pending
//   and later operation with it, within a second, with a ConnectionError
//   naming its rank and address; a timeout throws TimeoutError naming the
//   operation, the peer and the bytes still outstanding.
// A ProcessGroup is a cheap handle (copies share one group) and is
// thread-safe: several threads may send, receive and wait at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <type_traits>

#include <collie/dtype.hpp>
#include <collie/job_config.hpp>
#include <collie/store/store.hpp>
#include <collie/transport/mesh.hpp>

namespace collie {

// An operation in flight (isend, irecv; collectives later).
class Work {
 public:
  // What a Work waits on; implemented by each kind of operation.
  class State {
   public:
    virtual ~State() = default;
    virtual void wait(std::optional<std::chrono::milliseconds> timeout) = 0;
    virtual bool test() const = 0;
  };

  Work() = default;  // an empty Work is complete
  explicit Work(std::unique_ptr<State> state) : state_(std::move(state)) {}
  // A Work destroyed while pending waits for it first (with the group's
  // timeout), as a std::future from std::async does, so collie never writes
  // into or reads from a buffer after its Work is gone. Errors seen there are
  // logged, not thrown: call wait() to see them.
  ~Work();
  Work(Work&&) noexcept = default;
  Work& operator=(Work&& other) noexcept;

  // Blocks until the operation is done; throws its error if it failed
  // (ConnectionError, TimeoutError, RequestError...). wait() uses the group's
  // timeout; wait(t) throws TimeoutError after t.
  void wait();
  void wait(std::chrono::milliseconds timeout);

  // True once the operation has finished, successfully or not. Never blocks.
  bool is_completed() const;

 private:
  std::unique_ptr<State> state_;
  bool waited_ = false;
};

class ProcessGroup {
 public:
  struct Impl;
  explicit ProcessGroup(std::shared_ptr<Impl> impl);

  int rank() const;
  int size() const;

  // Raw buffers: `bytes` bytes at `data`.
  void send(const void* data, std::size_t bytes, int dst, int tag = 0);
  void recv(void* data, std::size_t bytes, int src, int tag = 0);
  Work isend(const void* data, std::size_t bytes, int dst, int tag = 0);
  Work irecv(void* data, std::size_t bytes, int src, int tag = 0);

  // Typed spans of any trivially copyable element (collie's dtypes and more).
  template <class T>
  requires std::is_trivially_copyable_v<T>
  void send(std::span<T> data, int dst, int tag = 0) {
    send(static_cast<const void*>(data.data()), data.size_bytes(), dst, tag);
  }
  template <class T>
  requires(std::is_trivially_copyable_v<T> && !std::is_const_v<T>) void recv(std::span<T> data,
                                                                             int src, int tag = 0) {
    recv(static_cast<void*>(data.data()), data.size_bytes(), src, tag);
  }
  template <class T>
  requires std::is_trivially_copyable_v<T> Work isend(std::span<T> data, int dst, int tag = 0) {
    return isend(static_cast<const void*>(data.data()), data.size_bytes(), dst, tag);
  }
  template <class T>
  requires(std::is_trivially_copyable_v<T> && !std::is_const_v<T>) Work
      irecv(std::span<T> data, int src, int tag = 0) {
    return irecv(static_cast<void*>(data.data()), data.size_bytes(), src, tag);
  }

  // The job this group belongs to, and its store (namespace of this run).
  const JobConfig& config() const;
  store::Store& store() const;
  // The peer mesh underneath (for collie's collectives and tools).
  transport::Mesh& mesh() const;

 private:
  std::shared_ptr<Impl> impl_;
};

// Joins the job described by `options` and the environment. See above.
ProcessGroup init(const InitOptions& options = {});

}  // namespace collie
