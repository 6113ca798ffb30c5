// The TCP backend: a mesh of sockets between the ranks of a job. Standalone
// Asio listens, resolves, connects and runs the handshakes; messages then
// move with recvmsg/sendmsg on the connection's descriptor (why:
// docs/transport.md). It serves any peer, on this host or another, and
// keeps every promise of transport.hpp.
//
//   auto t = std::make_shared<TcpTransport>(store, options);   // listens, publishes
//   auto s = t->isend(1, tag, data, bytes);
//   auto r = t->irecv(1, tag, out, bytes);
//   t->wait(s); t->wait(r);
//
// Addresses. Each rank listens on an ephemeral port of
// `options.listen_address` (the interface that routes to the master, see
// interfaces.hpp) and publishes "host:port" in the store under
// "<group>/addr/<rank>". It connects to a peer the first time it sends to or
// receives from it, so a ring costs O(n) sockets, not O(n^2). When two ranks
// connect to each other at once, the connection opened by the lower rank is
// kept and the other is dropped.
//
// Handshake. The accepting rank speaks first with a challenge (magic,
// version, its rank, a random nonce); the connecting rank answers with the
// group id, both ranks and HMAC-SHA256(token, nonce, group id, ranks); the
// acceptor checks all of it and answers accepted, duplicate or
// refused-with-a-reason. A stranger (wrong magic, version, group, rank or
// token, or silence past the handshake timeout) is refused and logged; the
// job is unharmed.
//
// Messages. Each message is a 32-byte header (tag, sequence number, length,
// fingerprint; little-endian) and its payload. A receive posted before its
// message arrives gets the payload read from the socket straight into the
// caller's memory. A message that arrives first waits in an
// unexpected-message queue, bounded by `max_unexpected_bytes` across all
// peers; when it is full, reading from that peer pauses (TCP's flow control
// pushes back on the sender) until a matching receive is posted. Reading
// and writing progress together, so large messages in both directions at
// once never deadlock. A send completes when its bytes are handed to the
// kernel (or, to oneself, copied).
//
// Progress. A thread that waits drives the sockets itself (spinning on
// non-blocking polls for `spin`, yielding the CPU between them, then
// sleeping in poll()), so a reply is seen without a thread hand-off. A
// background thread accepts connections, runs handshakes and moves data
// while nobody waits.
//
// Sockets: TCP_NODELAY (collie batches small messages itself, in one
// sendmsg), kernel buffer auto-tuning left on, header and payload written
// with one scatter/gather call, keep-alive probes so that a vanished host is
// noticed even without traffic, close-on-exec. See docs/transport.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <collie/store/store.hpp>
#include <collie/transport/transport.hpp>

namespace collie::transport {

class TcpTransport final : public Transport {
 public:
  // Listens, publishes this rank's address in `store`, and starts the
  // background thread. Throws collie::Error if it cannot listen.
  TcpTransport(std::shared_ptr<store::Store> store, TransportOptions options);
  // Fails what is still pending, joins the background thread and closes
  // every connection: it sends its end-of-stream after what was already
  // sent, then reads and drops what peers still send until they close too
  // (at most 250 ms), so that no connection is reset while a peer has not
  // yet read this rank's last messages.
  ~TcpTransport() override;
  TcpTransport(const TcpTransport&) = delete;
  TcpTransport& operator=(const TcpTransport&) = delete;

  int rank() const override;
  int world_size() const override;
  RequestPtr isend(int peer, Tag tag, const void* data, std::size_t bytes,
                   std::uint64_t fingerprint = 0) override;
  RequestPtr irecv(int peer, Tag tag, void* data, std::size_t bytes) override;
  RequestPtr irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) override;
  void wait(const RequestPtr& request,
            std::optional<std::chrono::milliseconds> timeout = std::nullopt) override;
  bool wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) override;
  int wait_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout) override;
  bool test(const RequestPtr& request) const override;
  std::uint64_t fingerprint(const RequestPtr& request) const override;
  std::size_t transferred(const RequestPtr& request) const override;
  std::vector<std::pair<int, std::uint64_t>> queued_fingerprints(Tag tag) const override;
  std::vector<std::pair<Tag, std::uint64_t>> queued_from(int peer) const override;
  bool any_queued() const override;
  ProgressClaim claim_progress() override;
  void wake_waiters() override;  // the thread asleep in poll(), through its eventfd
  std::string failure_of(int peer) const override;
  std::string describe_peer(int peer) const override;
  std::string describe() const override;  // "tcp on 10.0.0.4:41234"
  std::string describe_lanes(int peer) const override;
  void prefetch() override;

  void set_host_load(int ranks, int processors) override;
  void set_streams(int streams) override;
  // The connections that carry a pair's large messages now (1: no lanes).
  int streams() const;

  const TransportOptions& options() const;
  // "host:port" this rank listens on.
  std::string address() const;
  // The peers this rank holds a connection to now: the mesh connects on
  // first use, so a ring holds two whatever the world's size.
  int open_connections() const;
  // The lanes of the pair with `peer` (tcp/lanes.hpp): this rank's sending
  // ones, then the peer's, each with the chunks and bytes it has carried.
  struct LaneUse {
    int number = 0;
    bool sending = false;
    std::uint64_t chunks = 0;
    std::uint64_t bytes = 0;
    std::string from;  // a sending lane's source on another NIC; "": the pair's
    bool lost = false;  // lost while the pair went on (tcp/lane_failover.cpp)
  };
  std::vector<LaneUse> lanes(int peer) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace collie::transport
