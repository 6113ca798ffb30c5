// The connection table: every peer's stream and what the streams share,
// under one lock.
//
// One mutex (`mu`) guards every PeerStream, every request's guarded fields
// and all socket I/O: a message is read or written by one thread at a time,
// and a request changes hands (posted, matched, completed, failed) in one
// critical section. Requests finish here (complete, fail), which counts
// them and wakes the threads that sleep waiting for one. Wakeups reach the
// thread that polls the sockets: a waiter that drives them, else the
// background thread (progress.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <collie/transport/transport.hpp>

#include "peer_stream.hpp"
#include "request.hpp"
#include "unexpected_pool.hpp"
#include "wakeup.hpp"

namespace collie::transport::tcp {

// The background thread leaves the sockets to the callers until no request
// has finished for this long (progress.cpp, nudge_background).
inline constexpr std::chrono::milliseconds kQuiet{2};

class Connections {
 public:
  explicit Connections(const TransportOptions& options);

  const TransportOptions& opt;

  mutable std::mutex mu;
  std::condition_variable state_cv;  // a peer's state changed (with mu)
  // By rank (reserved once, never reallocated); this rank's own is Ready, without a socket.
  std::vector<PeerStream> peers;
  std::vector<int> connected;  // ranks with a socket, in the order they connected: polled
  UnexpectedPool pool;
  std::size_t paused_peers = 0;  // peers whose reading waits for queue space or a receive

  std::atomic<std::size_t> pending{0};  // requests not finished (changed under mu)
  std::atomic<int> waiters{0};          // threads in a wait
  // When a request last finished (steady_clock ticks): waits spin while
  // requests keep finishing (progress.cpp).
  std::atomic<std::int64_t> last_done{0};
  std::mutex done_mu;
  std::condition_variable done_cv;  // some request finished
  Wakeup background_wake;           // new work for the background thread
  Wakeup driver_wake;               // new work for the waiting thread that drives
  // The background thread's wake-up: set before it reads the sockets itself
  // (work nobody waits for); a wake-up without it only has the thread look
  // again at when to wake (nudge_background).
  std::atomic<bool> background_urgent{false};
  // When the background thread's poll ends (steady_clock ticks); 0 while
  // it is awake, deciding.
  std::atomic<std::int64_t> background_until{0};
  // Connections opened from now on within the host avoid a pacing
  // congestion control (tune(), sockets.hpp; TcpTransport::set_host_load).
  std::atomic<bool> avoid_pacing{true};
  // Lanes a rank opens to a peer (lanes.hpp): the user's COLLIE_STREAMS, or
  // under auto 1 until set_streams(); a message is striped only while > 1.
  std::atomic<int> streams{1};
  // A sending lane was lost (lane_failover.cpp): wakes the lane keeper
  // (lane_keeper.hpp), with mu held. Empty: nobody opens it again.
  std::function<void()> lanes_lost;

  PeerStream& peer(int rank) { return peers[static_cast<std::size_t>(rank)]; }
  const PeerStream& peer(int rank) const { return peers[static_cast<std::size_t>(rank)]; }

  // ---- requests (mu held) ----
  void started() { ++pending; }
  void complete(TcpRequest& r);
  // Fails `r` (once; a finished request is left alone).
  void fail(TcpRequest& r, ErrorKind kind, std::string message);
  // Fails `r` because its peer failed or went away for `reason`.
  void fail_for_peer(TcpRequest& r, ErrorKind kind, const std::string& reason);
  // Fails a receive matched with a message of another length (keeping the
  // message's fingerprint: it may say why the sizes differ).
  void fail_size_mismatch(TcpRequest& r, std::size_t sent, std::uint64_t fingerprint);

  // Work has come that no thread may be waiting for (a send the kernel did
  // not take whole, a wait that left requests pending). While the callers'
  // waits keep finishing requests they move it, and the background thread
  // takes over once they have been quiet for kQuiet: woken only if it
  // would sleep past that, and then only to look again at when to wake.
  // (Woken at once for each, it read the sockets between the caller's
  // waits and took turns with them, and a caller's posts and waits took
  // up to twice as long.)
  void nudge_background();
  // Wakes the background thread to read the sockets itself at once.
  void wake_background();

  // Queue space was freed: paused peers may read on (mu held).
  void resume_paused();
  // Installs a connected socket as `p`'s connection, sealed with `seal`
  // when given (mu held).
  void install(PeerStream& p, Descriptor connection, std::unique_ptr<SealedState> seal = nullptr);

  // Wakes whoever polls the peers now, so that it sees new work: a waiter
  // that drives them, else the background thread, at once where `urgent`
  // (a connection, a failure, queue space), else as nudge_background says
  // (a send the kernel did not take whole: the callers' waits move it).
  void wake_pollers(bool urgent = true);
  // A thread stops waiting (or drops its progress claim): the last one
  // hands the sockets back to the background thread if work is pending.
  void stop_waiting();

  // ---- messages (mu held) ----
  // "rank 3 at 10.0.0.4:41234", "rank 0 (itself)"
  std::string describe_peer(int rank) const;
  // "rank 0: recv from rank 1 at 10.0.0.5:41234 (tag 3, 1024 bytes)"
  std::string describe_request(const TcpRequest& r) const;
  // "512 of 1024 bytes received"
  std::string progress_text(const TcpRequest& r) const;
};

using transport::plural_bytes;

}  // namespace collie::transport::tcp
