// The shared-memory backend: ranks of one host move their messages through
// memory they share, with no system call on the data path.
//
//   // ranks 0-3 share this host (open_transport() decides that)
//   auto t = std::make_shared<ShmTransport>(store, options, {0, 1, 2, 3});
//   auto s = t->isend(1, tag, data, bytes);
//   auto r = t->irecv(1, tag, out, bytes);
//   t->wait(s); t->wait(r);
//
// Mailboxes. Each rank makes one mailbox: an anonymous memory file
// (memfd_create: no name in /dev/shm or anywhere, so nothing is left behind
// when a rank dies; mode 0600; size sealed), holding one ring per rank of
// the host that sends to it. It publishes "<pid> <fd> <secret> <address>" under
// "<group>/shm/<rank>" in the store. A peer that sends to it, or receives
// from it, opens /proc/<pid>/fd/<fd> (the kernel lets only the same user,
// with the right to inspect that process, do so), maps it and checks the
// random 128-bit secret, which only the job's store holds.
//
// Rings. A message is a 64-byte header (tag, sequence, length, fingerprint)
// and its payload, padded to 64 bytes, written by the sender into its ring
// (1-2 MiB: layout.hpp) in the receiver's mailbox and read out by the
// receiver: two copies, by the two processes at once, in pieces of at most
// 32 KiB so that the receiver copies out while the sender copies in. A
// receive that reduces (irecv_consume) reads the payload where the sender
// put it: one copy. The sender stores with ordinary or non-temporal stores,
// whichever it measures faster (they differ widely between cores that share
// a cache and cores that do not: docs/transport.md;
// TransportSettings::shm_stores), and a plain receive of 8 MiB or more
// stores into its destination around the caches. Matching, ordering, size
// mismatches, fingerprints and the bounded unexpected-message queue work as
// over TCP (transport.hpp): a message that does not fit the queue stays in
// the ring, and the sender waits for room.
//
// Waits spin (`spin`, yielding the CPU), then sleep on a futex in the
// rank's mailbox ("the bell"), which a peer rings after it writes to the
// rank's rings or frees room in the peer's own, only when somebody sleeps.
// A background thread moves data while nobody waits.
//
// Liveness. A peer's process is watched through a pidfd, and its mailbox
// says when it closed its transport: pending and later operations with a
// peer that died (SIGKILL included) or closed fail within a second with
// ConnectionError naming it, after every message it had sent whole has been
// taken in.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <collie/store/store.hpp>
#include <collie/transport/transport.hpp>

namespace collie::transport {

class ShmBoard;

class ShmTransport final : public Transport {
 public:
  // `local`: the ranks of this host that this rank reaches through shared
  // memory, itself included (every rank of the host must pass the same
  // list). `advertised`: where else this rank is reached ("host:port" of
  // its TCP backend), published for peers' messages ("rank 2 at
  // 10.0.0.4:41234 (shared memory)"). Makes and publishes the mailbox;
  // throws collie::Error if it cannot (no memfd, out of memory).
  ShmTransport(std::shared_ptr<store::Store> store, TransportOptions options,
               std::vector<int> local, std::string advertised = "");
  // Fails what is still pending, says in the mailbox that it closed (peers
  // fail what they still wait for from it, once they have read every
  // message it sent) and unmaps.
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

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
  std::shared_ptr<void> watch_for(std::function<void()> wake) override;  // its thread, on the bell
  std::string failure_of(int peer) const override;
  std::string describe_peer(int peer) const override;  // "rank 3 (pid 1234, shm)"
  bool shares_memory_with(int peer) const override;     // the ranks it serves
  // Entries in the members' mailboxes (board.cpp); none past kMostMembers
  // or kSpaces.
  std::unique_ptr<Board> open_board(std::span<const int> members, std::uint32_t space) override;
  std::string describe() const override;               // "shm"
  void prefetch() override;
  void set_host_load(int ranks, int processors) override;  // waits yield where crowded

 private:
  RequestPtr post(int peer, Tag tag, std::byte* data, std::size_t bytes, Consumer consume);

  struct Impl;
  friend class ShmBoard;
  std::unique_ptr<Impl> impl_;
};

// This host as its ranks tell each other apart: the boot id, the user, and
// the PID and network namespaces (ranks in different containers of one
// machine cannot reach each other's mailboxes). Ranks that publish the same
// identity use shared memory (open.hpp). COLLIE_HOST_ID, when set, replaces
// it (to keep ranks of one host apart, for tests).
std::string host_identity();

// Why this process cannot use the shared-memory backend (no memfd_create
// or pidfd_open, /proc not mounted or not readable, a seccomp profile that
// forbids them), or "" when it can. open_transport() asks before it
// publishes a host identity: a rank that cannot is alone on its "host",
// and its peers reach it over TCP.
std::string shared_memory_unusable();

}  // namespace collie::transport
