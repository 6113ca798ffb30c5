// The peer mesh: point-to-point messages between the ranks of a job.
//
//   auto mesh = std::make_shared<Mesh>(store, options);   // listens, publishes
//   auto s = mesh->isend(1, tag, data, bytes);
//   auto r = mesh->irecv(1, tag, out, bytes);
//   mesh->wait(s); mesh->wait(r);
//
// Addresses. Each rank listens on an ephemeral port of `listen_address` (the
// interface that routes to the master, see interfaces.hpp) and publishes
// "host:port" in the store under "<group>/addr/<rank>". It connects to a peer
// the first time it sends to or receives from it, so a ring costs O(n)
// sockets, not O(n^2). When two ranks connect to each other at once, the
// connection opened by the lower rank is kept and the other is dropped.
//
// Handshake. The accepting rank speaks first with a challenge (magic, version,
// its rank, a random nonce); the connecting rank answers with the group id,
// both ranks and HMAC-SHA256(token, nonce, group id, ranks); the acceptor
// checks all of it and answers accepted, duplicate or refused-with-a-reason.
// A stranger (wrong magic, version, group, rank or token, or silence past the
// handshake timeout) is refused and logged; the job is unharmed.
//
// Messages. Each message is a 32-byte header (tag, sequence number, length,
// fingerprint; little-endian) and its payload. Between two ranks, messages
// with the same tag are received in the order they were sent; different tags
// are matched independently. A receive posted before its message arrives
// gets the payload read from the socket straight into the caller's memory.
// A message that arrives first waits in an unexpected-message queue, bounded
// by `max_unexpected_bytes` across all peers; when it is full, reading from
// that peer pauses (TCP's flow control pushes back on the sender) until a
// matching receive is posted. Reading and writing progress together, so
// large messages in both directions at once never deadlock.
//
// Buffers. isend reads from, and irecv writes into, the caller's memory until
// the request completes: keep it alive and untouched until then. A send
// completes when its bytes are handed to the kernel (or, to oneself, copied).
//
// Progress. A thread that waits drives the sockets itself (spinning on
// non-blocking polls for `spin`, yielding the CPU between them, then
// sleeping in poll()), so a reply is seen without a thread hand-off. A background thread accepts connections, runs
// handshakes and moves data while nobody waits.
//
// Failure. When a peer's connection closes or resets, or it breaks the
// protocol, every pending and later operation with that peer fails with a
// ConnectionError (ProtocolError) naming the peer's rank and address, the
// operation and how many bytes had moved. Messages that arrived complete
// before the failure can still be received. A wait past its timeout throws
// TimeoutError naming the operation, the peer and the bytes outstanding; a
// request that had not started is withdrawn cleanly, one that was half-way
// through a message closes the connection to that peer (the byte stream
// cannot be resumed).
//
// Sockets: TCP_NODELAY (collie batches small messages itself, in one
// sendmsg), kernel buffer auto-tuning left on (a fixed SO_SNDBUF/SO_RCVBUF
// disables it; auto-tuning reaches the loopback limit), header and payload written
// with one scatter/gather call, keep-alive probes so that a vanished host is
// noticed even without traffic. See docs/transport.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <collie/store/store.hpp>

namespace collie::transport {

inline constexpr std::uint16_t kProtocolVersion = 1;

struct MeshOptions {
  int rank = 0;
  int world_size = 1;
  std::string group = "world";  // names the store keys; printed in errors
  std::uint64_t group_id = 0;   // the same on every rank, different per job (handshake)
  std::string token;            // shared secret; empty: no secret, still checked equal
  std::string listen_address = "127.0.0.1";  // advertised to peers; port is ephemeral
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // connect and default waits
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};  // per accepted socket
  std::size_t max_unexpected_bytes = std::size_t{256} << 20;
  std::chrono::microseconds spin{50};  // busy polling before a wait sleeps
};

// One send or receive. Opaque; ask the Mesh about it.
struct Request;
using RequestPtr = std::shared_ptr<Request>;

class Mesh {
 public:
  // Listens, publishes this rank's address in `store`, and starts the
  // background thread. Throws collie::Error if it cannot listen.
  Mesh(std::shared_ptr<store::Store> store, MeshOptions options);
  // Fails what is still pending, joins the background thread and closes
  // every connection: it sends its end-of-stream after what was already
  // sent, then reads and drops what peers still send until they close too
  // (at most 250 ms), so that no connection is reset while a peer has not
  // yet read this rank's last messages.
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  // Starts sending `bytes` bytes at `data` to `peer` with `tag`. Connects to
  // the peer first if this is the first message between the two (blocking
  // until the handshake is done, within the timeout). Throws collie::Error
  // for a rank out of range; connection failures surface in wait().
  RequestPtr isend(int peer, std::uint64_t tag, const void* data, std::size_t bytes,
                   std::uint64_t fingerprint = 0);

  // Starts receiving exactly `bytes` bytes from `peer` with `tag` into
  // `data`. A message of another length fails this receive with a
  // RequestError naming both lengths (the message is consumed).
  RequestPtr irecv(int peer, std::uint64_t tag, void* data, std::size_t bytes);

  // Reads every rank's address from the store now (waiting for those not
  // yet published), so later connections need the store no more: useful
  // when the store lives in a process that may finish first.
  void prefetch_addresses();

  // Waits until `request` is done; throws its error if it failed. nullopt:
  // the mesh's timeout. Throws TimeoutError past the timeout (see above).
  void wait(const RequestPtr& request,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  // Waits up to `timeout` for `request`: true once it is done (throwing its
  // error if it failed), false if it is still pending (it stays posted,
  // unlike a timeout of wait()).
  bool wait_some(const RequestPtr& request, std::chrono::milliseconds timeout);

  // (peer, fingerprint) of each message with `tag` that arrived before any
  // receive asked for it and still waits for one. For diagnosing a wait that
  // takes long: a message under the right tag from an unexpected peer.
  std::vector<std::pair<int, std::uint64_t>> queued_fingerprints(std::uint64_t tag) const;

  // True if the request has finished, successfully or not (never blocks).
  bool test(const RequestPtr& request) const;

  // The fingerprint the sender attached to a finished receive (also when it
  // failed for a size mismatch).
  std::uint64_t fingerprint(const RequestPtr& request) const;

  // Bytes of payload moved so far.
  std::size_t transferred(const RequestPtr& request) const;

  // "rank 3 at 10.0.0.4:41234", for messages.
  std::string describe_peer(int peer) const;

  int rank() const { return options_.rank; }
  int world_size() const { return options_.world_size; }
  const MeshOptions& options() const { return options_; }
  // "host:port" this rank listens on.
  std::string address() const;
  // Connections open right now (for tests: the mesh connects lazily).
  int connection_count() const;

  // A fresh random group id (from the system's cryptographic generator).
  static std::uint64_t random_group_id();

 private:
  // Drives the sockets until `request` finishes or `deadline` passes.
  bool drive_until(const RequestPtr& request, std::chrono::steady_clock::time_point deadline);

  struct Impl;
  MeshOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie::transport
