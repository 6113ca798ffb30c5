// Work: the handle of an operation in flight (an isend, an irecv, an
// async collective of a ProcessGroup, process_group.hpp), to wait on.
#pragma once

#include <chrono>
#include <memory>

namespace collie {

namespace detail {
class WorkState;  // what a Work waits on (the runtime's own)
struct Access;    // how the runtime makes handles
}  // namespace detail

// An operation in flight: isend, irecv, or an async collective.
class Work {
 public:
  Work();  // an empty Work: complete
  // A Work destroyed while pending waits for it first (with the group's
  // timeout), as a std::future from std::async does, so collie never writes
  // into or reads from a buffer after its Work is gone; that holds after a
  // wait(t) that timed out too (an async collective keeps running then; a
  // send or receive was withdrawn). Errors seen there are logged, not
  // thrown: call wait() to see them.
  ~Work();
  Work(Work&&) noexcept;
  Work& operator=(Work&& other) noexcept;

  // Blocks until the operation is done; throws its error if it failed
  // (ConnectionError, TimeoutError, RequestError...). wait() uses the group's
  // timeout; wait(t) throws TimeoutError after t.
  void wait();
  void wait(std::chrono::milliseconds timeout);

  // True once the operation has finished, successfully or not. Never blocks.
  bool is_completed() const;

  // For a receive from any rank (irecv_any): the rank, in its group, whose
  // message it received, once it completed; -1 before, and for any other
  // operation.
  int source() const;

 private:
  friend struct detail::Access;
  explicit Work(std::unique_ptr<detail::WorkState> state);
  std::unique_ptr<detail::WorkState> state_;
};

}  // namespace collie
