// The point-to-point transport: the one interface the runtime moves bytes
// through. Algorithms never see a backend; the executor posts sends and
// receives of bytes between ranks here and waits for them.
//
//   std::shared_ptr<Transport> t = open_transport(store, options);  // open.hpp
//   auto s = t->isend(1, tag, data, bytes, fingerprint);
//   auto r = t->irecv(1, tag, out, bytes);
//   t->wait(s); t->wait(r);
//
// Backends. TcpTransport (tcp.hpp) serves any peer; a backend for peers on
// the same host (shared memory) serves some. PeerRouter (peer_router.hpp)
// sends each peer's requests to the backend chosen for that peer when the
// group is made, and is itself a Transport. Every backend keeps the contract
// below, so the runtime cannot tell them apart.
//
// Matching. A receive names (peer, tag, size). Between two ranks, messages
// with the same tag are received in the order they were sent; different tags
// are matched independently. A message whose length differs from the
// receive's size fails that receive with a RequestError naming both lengths
// (the message is consumed, the stream stays in step). A message that
// arrives before its receive waits, bounded, in the backend (queued_*).
//
// Buffers. isend reads from, and irecv writes into, the caller's memory
// until the request has finished (test() is true or a wait returned or
// threw): keep it alive and untouched until then. A send completes when its
// bytes are the backend's (handed to the kernel, copied out); completion says
// nothing about the receiver. irecv_consume hands the payload over where it
// arrives instead (see there).
//
// Fingerprints. Every send carries 64 bits of the caller's (the runtime
// encodes its call there); a finished receive reports the sender's, also
// when it failed for a size mismatch or a withdrawn message, so the caller
// can say why sizes differ.
//
// Failure. When a peer dies, closes, resets its connection or breaks the
// protocol, every pending and later operation with that peer fails within a
// second with ConnectionError (ProtocolError) naming this rank, the peer's
// rank and address, the operation and the bytes moved. Messages that had
// arrived complete before can still be received. A wait past its timeout
// throws TimeoutError naming the operation, the peer, the time and the
// bytes; a request that had not started is withdrawn (the pair stays
// usable), and so is a receive half-way through its message (the rest of
// the message is dropped as it comes); a send half-way through a message
// fails the peer (a byte stream cannot resume), or a backend that can
// withdraw it (shared memory) does: its receive then fails with
// WithdrawnError (a RequestError) and the sender's fingerprint.
//
// Thread safety. Every method may be called from any thread at once. Waits
// by several threads on different requests progress together.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <collie/transport/board.hpp>
#include <collie/transport/settings.hpp>

namespace collie::seal {
class Certificates;
}

namespace collie::transport {

using Tag = std::uint64_t;

// What every backend is made with (each reads the fields it needs).
struct TransportOptions {
  int rank = 0;
  int world_size = 1;
  std::string group = "world";  // names the store keys; printed in errors
  std::uint64_t group_id = 0;   // the same on every rank, different per job (handshakes)
  std::string token;            // shared secret; empty: no secret, still checked equal
  std::string listen_address = "127.0.0.1";  // TCP: advertised to peers; the port is ephemeral
  // TCP: this host's other interfaces' addresses (choose_lane_addresses(),
  // interfaces.hpp): listened on too and published, so that a pair's lanes
  // may go over a second NIC (tcp/lane_paths.hpp).
  std::vector<std::string> lane_addresses;
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // connect and default waits
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};  // per accepted socket
  std::size_t max_unexpected_bytes = std::size_t{256} << 20;  // queued before their receive
  std::string host_id;  // this host as ranks tell hosts apart; empty: host_identity() (shm.hpp)
  TransportSettings settings;  // the user's choices (settings.hpp)
  // TCP: this host's certificate proof for sealed connections, loaded; null:
  // loaded from settings.seal_cert etc. when those are set, else none.
  std::shared_ptr<const seal::Certificates> certificates;
};

// One send or receive in flight. A backend derives its own; callers hold it
// and ask the transport that made it about it.
class Request {
 public:
  explicit Request(int peer) : peer_(peer) {}
  virtual ~Request() = default;
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  int peer() const { return peer_; }

 private:
  int peer_;
};
using RequestPtr = std::shared_ptr<Request>;

// Takes a receive's payload where it arrives: called with pieces that
// together cover [0, bytes) exactly once: consecutive, in order, except a
// TCP message striped over lanes (tcp/lanes.hpp), which comes in chunks at
// multiples of 64 KiB, each whole (64 KiB, the last shorter), in any order.
using Consumer = std::function<void(std::size_t offset, std::span<const std::byte> piece)>;

// A claim on a backend's progress (Transport::claim_progress()): what
// releases it when it goes. Moves, never copies; empty: nothing to release.
// A value, so that a call takes and drops one without allocating.
class ProgressClaim {
 public:
  ProgressClaim() = default;
  ProgressClaim(void (*release)(void*), void* target) : release_(release), target_(target) {}
  ProgressClaim(ProgressClaim&& o) noexcept : release_(o.release_), target_(o.target_) {
    o.release_ = nullptr;
  }
  ProgressClaim& operator=(ProgressClaim&& o) noexcept {
    if (this != &o) {
      reset();
      release_ = o.release_;
      target_ = o.target_;
      o.release_ = nullptr;
    }
    return *this;
  }
  ~ProgressClaim() { reset(); }
  explicit operator bool() const { return release_ != nullptr; }
  void reset() {
    if (release_ != nullptr) std::exchange(release_, nullptr)(target_);
  }

 private:
  void (*release_)(void*) = nullptr;
  void* target_ = nullptr;
};

// Throws collie::Error for a peer outside ranks 0..world_size-1, worded
// alike by every transport: "rank 0: send to rank 5: rank 5 is not in the
// group (ranks 0 to 3)".
void check_peer(int rank, int world_size, int peer, std::string_view op);

// Threads that wait on behalf of another thread of their process: an
// async runner, a master's completion thread, a torch work's runner. The
// thread they serve may want the processor they would spin on (ranks
// bound to a processor each, `collie launch --bind`, share it with their
// own threads), so a marked thread's waits yield the processor every turn
// where others spin: one system call a turn where nothing else is ready,
// and the program's thread at once where it is. Marks the calling thread
// (true) or clears the mark; a thread starts unmarked.
void set_waits_for_others(bool on);
// Whether the calling thread is marked so.
bool waits_for_others();

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Starts sending `bytes` bytes at `data` to `peer` with `tag`, carrying
  // `fingerprint`. Sending to oneself copies at once. May block the first
  // time it meets a peer, while the backend connects (within its timeout).
  // Throws collie::Error for a peer out of range; failures of the peer
  // surface in wait().
  virtual RequestPtr isend(int peer, Tag tag, const void* data, std::size_t bytes,
                           std::uint64_t fingerprint = 0) = 0;

  // Starts receiving exactly `bytes` bytes from `peer` with `tag` into `data`.
  virtual RequestPtr irecv(int peer, Tag tag, void* data, std::size_t bytes) = 0;

  // Like irecv, but with no buffer: the payload is handed to `consume` where
  // it arrives (the backend's receive buffer, a queued message, the bytes of
  // a send to oneself), so a reduction can read it there instead of from a
  // copy. `consume` runs on whichever thread drives the backend (a waiter,
  // the backend's own thread, or this call itself for bytes already here),
  // while the backend holds its lock: it must be short and must not call
  // the transport. A piece is valid only during its call. The request
  // completes after the last piece was consumed; on failure, the pieces seen
  // so far are all there will be.
  virtual RequestPtr irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) = 0;

  // Waits until `request` is done; throws its error if it failed. nullopt:
  // the backend's timeout. Throws TimeoutError past the timeout (see above).
  virtual void wait(const RequestPtr& request,
                    std::optional<std::chrono::milliseconds> timeout = std::nullopt) = 0;

  // Waits up to `timeout`: true once the request is done (throwing its error
  // if it failed), false if it is still pending (it stays posted, unlike a
  // wait() that times out).
  virtual bool wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) = 0;

  // Waits up to `timeout` until one of `requests` is done (at once if one
  // already is): the index of a finished one, or -1 if none finished. A
  // failed request counts as finished; wait() on it throws its error. With
  // no requests it moves what is on its way for `timeout` (into the
  // unexpected queue), then returns -1.
  virtual int wait_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout) = 0;

  // True once the request has finished, successfully or not. Never blocks.
  virtual bool test(const RequestPtr& request) const = 0;

  // The sender's fingerprint of a finished receive (also when it failed for
  // a size mismatch).
  virtual std::uint64_t fingerprint(const RequestPtr& request) const = 0;

  // Payload bytes moved so far.
  virtual std::size_t transferred(const RequestPtr& request) const = 0;

  // (peer, fingerprint) of each message with `tag` that arrived before any
  // receive asked for it and still waits for one: for a wait that takes long,
  // a message under the right tag from a peer it did not expect one from.
  virtual std::vector<std::pair<int, std::uint64_t>> queued_fingerprints(Tag tag) const = 0;

  // (tag, fingerprint) of every message from `peer` that arrived before its
  // receive, under any tag: a peer that left after an earlier call failed
  // may have said why there (a failure notice).
  virtual std::vector<std::pair<Tag, std::uint64_t>> queued_from(int peer) const = 0;

  // Whether any message waits for its receive now, under any tag: false is
  // the usual case, and it costs an atomic load (no lock), so a check that
  // runs on every call can ask this first.
  virtual bool any_queued() const = 0;

  // Says that the calling thread keeps waiting on its requests (a
  // collective, between two of its waits): until the returned claim is
  // dropped, a backend's own thread leaves moving the data to the threads
  // that wait, so no message changes hands between threads on its way.
  // Without a claim, requests also progress while nobody waits. Claims
  // nest and may be held by several threads; a backend without a thread of
  // its own returns an empty one.
  virtual ProgressClaim claim_progress() = 0;

  // For one wait across backends (PeerRouter::wait_any), which sleeps in
  // one backend's wait while another's requests may finish too:
  // watch_for() has this backend's own thread move its data while the
  // returned watch lives (claims or not) and call `wake` after it moved
  // some or failed a peer; `wake` runs on that thread, never after the
  // watch is dropped. wake_waiters() wakes a thread asleep in this
  // backend's wait so that it looks again at its requests (a wait_any
  // given another backend's requests too finishes with them). Defaults: no
  // watch (empty), and nothing to wake.
  virtual std::shared_ptr<void> watch_for(std::function<void()> /*wake*/) { return nullptr; }
  virtual void wake_waiters() {}

  // "rank 3 at 10.0.0.4:41234", for messages.
  virtual std::string describe_peer(int peer) const = 0;

  // Why this backend failed `peer` (every operation with it fails so), or
  // empty while it has not, or if it does not serve it. A receive from any
  // rank asks, since no request of its own would fail: a peer that closed
  // after its last message reads as failed too, so only "every peer has
  // failed" means nobody is left to send.
  virtual std::string failure_of(int /*peer*/) const { return {}; }

  // What carries this rank's messages, for logs and tools:
  // "tcp on 10.0.0.4:41234".
  virtual std::string describe() const = 0;
  // The connections that carry this rank's large messages to `peer` beside
  // the pair's own, for tools: "lane 1: 40 chunks, 2.5 MiB at 480 Mbit/s
  // over 0.04 s busy; lane 2 from 10.79.0.1: ..."; empty: none.
  virtual std::string describe_lanes(int /*peer*/) const { return {}; }

  // Whether messages to `peer` go through memory shared with it (and so
  // cost what shared memory costs: the runtime's cost model). Both ranks
  // of a pair answer alike.
  virtual bool shares_memory_with(int /*peer*/) const { return false; }

  // A board (board.hpp) for the group of `members` (ranks, this one among
  // them, in the group's order) in tag space `space`, or null where this
  // backend has none for them (not all of them share this rank's memory,
  // too many, a space past Board::kSpaces). Every member gets one, or none,
  // alike. Default: none.
  virtual std::unique_ptr<Board> open_board(std::span<const int> /*members*/,
                                            std::uint32_t /*space*/) {
    return nullptr;
  }

  // Reads from the store now everything later connections need (every
  // rank's address), waiting for ranks that have not published yet, so that
  // the transport needs the store no more: rank 0 may host it and exit first.
  virtual void prefetch() = 0;

  // What the runtime learned once every rank joined: `ranks` of the job
  // share this machine's `processors` (counted by machine: hosts told apart
  // only by network namespace or COLLIE_HOST_ID share them too). A backend
  // may tune itself from then on (TCP: within the host, a pacing congestion
  // control only where ranks outnumber processors; shared memory: waits
  // yield the processor where they do). Default: nothing.
  virtual void set_host_load(int /*ranks*/, int /*processors*/) {}

  // How many connections carry a pair's large messages from now on, where
  // the user left it to the runtime (COLLIE_STREAMS=auto; the link probe's
  // choice): TCP opens that many lanes to a peer at its next large message
  // (tcp/lanes.hpp; 1: none). A number the user set stays. Default: nothing.
  virtual void set_streams(int /*streams*/) {}
};

}  // namespace collie::transport
