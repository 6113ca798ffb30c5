// Who moves the bytes: the waiting thread, or the background thread.
//
// A thread that waits for a request drives the sockets itself: it polls the
// connected peers without sleeping for `spin` (yielding the CPU between
// polls, so that on a host with more ranks than cores the rank it waits for
// can run), then sleeps in poll() at most 50 ms at a time, until the request
// finishes. So a reply is read by the thread that wants it, with no
// hand-off between threads. One thread drives at a time (`drive_mu`); other
// waiters sleep on the table's condition variable, woken as requests finish.
//
// The background thread accepts connections and runs handshakes (listener.hpp)
// and, while nobody waits, moves data too, so that an isend completes even
// if its wait comes late. When a thread starts waiting, the background
// thread leaves the peers' sockets to it.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <poll.h>
#include <vector>

#include "connections.hpp"
#include "listener.hpp"
#include "request.hpp"

namespace collie::transport::tcp {

class Progress {
 public:
  Progress(Connections& table, Listener& listener) : table_(table), listener_(listener) {}

  // Drives the sockets until `r` finishes or `deadline` passes; true if it
  // finished.
  bool drive_until(TcpRequest& r, std::chrono::steady_clock::time_point deadline);
  // The same until `finished()` is true (it is asked often: keep it cheap).
  bool drive_until_any(const std::function<bool()>& finished,
                       std::chrono::steady_clock::time_point deadline);

  // The background thread's loop, until stop().
  void background_loop();
  void stop();

  // Held by the thread that polls the peers' sockets.
  std::mutex drive_mu;

 private:
  // Adds the Ready peers' sockets to a poll set (mu held).
  // True if it added a lane. `rest_until`: when the first resting lane
  // (lanes.hpp) wants to be looked at again (max(): none rests).
  bool add_peers(std::vector<pollfd>& fds, std::vector<int>& who,
                 std::chrono::steady_clock::time_point& rest_until);
  // Moves data for the peers whose sockets are ready (mu held).
  void service(const std::vector<pollfd>& fds, const std::vector<int>& who);
  // One poll of the peers by the waiting thread (drive_mu held).
  void drive_once(int timeout_ms, std::vector<pollfd>& fds, std::vector<int>& who);
  template <class Finished>
  bool drive(const Finished& finished, std::chrono::steady_clock::time_point deadline);

  Connections& table_;
  Listener& listener_;
  std::atomic<bool> stopping_{false};
};

}  // namespace collie::transport::tcp
