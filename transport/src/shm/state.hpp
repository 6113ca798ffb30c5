// What the shared-memory backend holds (ShmTransport::Impl): this rank's
// mailbox, its peers and their rings, the requests, one lock; and which
// file implements each part of it:
//
//   mailbox.cpp      making this rank's mailbox, publishing it, attaching
//                    to a peer's (through the store and /proc)
//   ring.cpp         the rings' send and receive state machine, matching,
//                    the unexpected queue, finishing requests
//   single_copy.cpp  large messages read from the sender's memory
//   progress.cpp     who moves the data: waiting threads and the
//                    background thread; liveness; sleeping on the bell
//   board.cpp        groups' boards (board.hpp): entries in the mailboxes
//   shm_transport.cpp  the Transport face, and timeouts
//
// Locks: one mutex (`mu`) guards every request, queue and ring cursor of
// this rank; `drive_mu` lets one thread drive at a time (others sleep on
// `done_cv`). The shared memory itself is read and written under `mu` on
// this side; the peer's side synchronises through the ring's head and tail
// (release/acquire) and the bell (bell.hpp).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <span>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <vector>

#include <collie/store/store.hpp>
#include <collie/transport/shm.hpp>

#include "../block_pool.hpp"
#include "../request_state.hpp"
#include "../tag_queues.hpp"
#include "layout.hpp"
#include "ring_copy.hpp"

namespace collie::transport {

using ShmRequest = RequestState;  // nothing of its own beyond what every request has
using ShmRequestPtr = std::shared_ptr<ShmRequest>;

namespace shm {

// A message that came before its receive.
struct Queued {
  // Up to 64 KiB: a pooled block; never zeroed (only `arrived` bytes are read).
  std::vector<std::byte, UninitPoolAllocator<std::byte>> data;
  std::uint64_t fingerprint = 0;
  std::size_t arrived = 0;
};
using QueuedPtr = std::shared_ptr<Queued>;

// Departed: its mailbox cannot be reached (it closed its transport or
// exited before this rank looked); what it wrote into this rank's ring can
// still be read, and then its receives fail.
enum class PeerState { Unattached, Ready, Departed, Failed };

// One rank of the world, as this rank sees it (those off this host stay
// Unattached and never used).
struct Peer {
  int rank = 0;
  std::size_t slot = 0;  // its index among the host's ranks
  // With the ready words (layout.hpp): in `reading` (its ring may hold
  // more than one pass read) or `sending` (sends or unacknowledged
  // single-copy sends) of the Impl.
  bool listed_reading = false, listed_sending = false;
  bool local = false;
  PeerState state = PeerState::Unattached;
  std::string published;  // "<pid> <fd> <secret hex> <address>"
  std::string address;    // where else it is reached (its TCP address), for messages
  pid_t pid = 0;
  int pidfd = -1;
  std::unique_ptr<Mapping> theirs;
  // Sending: my ring in its mailbox.
  RingCursors* out = nullptr;
  std::byte* out_ring = nullptr;
  std::uint64_t out_head = 0;
  // The receiver's read cursor as last read: the ring has at least the
  // room it leaves, so a send reads the cursor's line (which the receiver
  // writes at every message) only when that room is not enough.
  std::uint64_t out_tail_seen = 0;
  Fifo<ShmRequestPtr> sends;
  std::size_t send_done = 0;  // ring bytes of the front send written
  std::array<std::uint64_t, 6> send_header{};
  Fifo<ShmRequestPtr> in_flight;  // single-copy sends the receiver has not read yet
  std::uint64_t acks_seen = 0;
  std::uint64_t send_seq = 0;
  // Per entry of the ring's `withdrawn`: where the message it names ends in
  // the ring (the write cursor then); until the receiver has read that
  // far, the entry is not free.
  std::array<std::uint64_t, RingCursors::kWithdrawSlots> withdrawn_end{};
  RingCopier copier;  // ordinary or non-temporal stores, by what they cost
  // Receiving: its ring in my mailbox.
  RingCursors* in = nullptr;
  std::byte* in_ring = nullptr;
  std::uint64_t in_tail = 0;
  std::uint64_t recv_seq = 0;
  std::uint64_t reading_seq = 0;  // the sequence number of the message being read
  TagQueues<ShmRequestPtr> posted;
  TagQueues<QueuedPtr> unexpected;
  bool paused = false;  // the next message waits for room in the unexpected queue
  // The message being read.
  bool reading = false;
  std::size_t length = 0;     // its payload
  std::size_t read_done = 0;  // payload bytes read
  bool remote = false;        // it is in the sender's memory, at:
  std::uint64_t remote_address = 0;
  std::uint64_t acks_given = 0;  // single-copy messages read whole
  ShmRequestPtr target;          // the receive it goes to, or
  QueuedPtr queued;              // the queue entry, or neither: dropped
  Tag reading_tag = 0;           // its tag
  // Why it failed.
  ErrorKind failure_kind = ErrorKind::Connection;
  std::string failure;
};

}  // namespace shm

namespace shm {
// How often a wait looks whether its peers are alive (a wait on the rings,
// and a board's once it sleeps).
inline constexpr std::chrono::milliseconds kLivenessEvery{10};
}  // namespace shm

struct ShmTransport::Impl {
  using Clock = std::chrono::steady_clock;
  using Peer = shm::Peer;

  TransportOptions options;
  std::shared_ptr<store::Store> store;
  std::vector<int> local;
  std::size_t ring_bytes = shm::kRingMost;  // ring_bytes_for() the host's ranks
  int memfd = -1;
  shm::Mapping mine;
  std::uint64_t secret[2] = {0, 0};
  std::string advertised;  // "host:port" where else this rank is reached; "" none
  std::vector<Peer> peers;
  std::vector<int> attached;  // ranks Ready or failed after being attached
  // More than kReadyFrom ranks on the host (and no more than the ready
  // words cover): senders mark the receiver's ready words, and a turn
  // reads those, the peers in `reading` and those in `sending`, instead of
  // every peer (mu).
  bool use_ready = false;
  std::size_t my_slot = 0;
  std::vector<int> reading, sending;

  mutable std::mutex mu;
  std::mutex drive_mu;
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::atomic<int> waiters{0};
  std::atomic<std::uint32_t> idle_word{0};  // the background thread's futex (stop, watches)
  // watch_for(): while any watch lives, the background thread sleeps on the
  // bell and moves the data, then calls every watch's wake (watch_mu held,
  // so that none is called once its watch is dropped).
  std::atomic<int> watching{0};
  std::mutex watch_mu;
  std::vector<std::pair<std::uint64_t, std::function<void()>>> watches;  // watch_mu
  std::uint64_t watch_serial = 0;                                        // watch_mu
  // Requests finished so far: the background thread tells a quiet spell
  // from it (a count, not a time: reading the clock at every finished
  // request cost a tenth of an 8 B all_reduce).
  std::atomic<std::uint64_t> done_count{0};
  // One more finished (or posted board) call. The background thread only
  // looks for a change, so a plain increment serves (a locked one costs a
  // small call as much as a fence); one lost between threads is no loss.
  void note_activity() {
    done_count.store(done_count.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  std::atomic<std::size_t> queued_count{0};
  std::size_t held = 0;  // unexpected bytes held (mu)
  std::atomic<bool> stopping{false};
  // More ranks on this machine than processors: waits yield. Its own
  // ranks at first; set_host_load() counts the machine's whole job.
  std::atomic<bool> crowded{false};
  // The machine's ranks per processor (rounded up), as counted for
  // `crowded`: past spin / kYieldTurn of them, a round of yields through
  // the ranks of one processor outlasts the spin, and a wait sleeps at once.
  std::atomic<int> per_processor{1};
  // Other work fills the machine's processors (machine_busy(),
  // host_cpus.hpp): a wait then sleeps on its bell at once, as a blocking
  // socket does, and the kernel wakes it ahead of the work that has used
  // its time slice, where a rank that spins or yields has used its own.
  // The background thread looks every kLoadEvery (look_at_load()).
  std::atomic<bool> busy{false};
  std::atomic<int> machine_ranks{0};  // this job's ranks on this machine
  // Records where the calling thread waits in this rank's header
  // (MailboxHeader::cpu) and returns it: 1 + the processor, 0 if unknown.
  std::uint32_t note_processor();
  // Whether another of the host's ranks last waited on the processor this
  // one runs on now (after note_processor()). The answer is kept for
  // kLivenessEvery on that processor (mu), so that a wait at hundreds of
  // ranks does not read every rank's header each time.
  bool processor_shared();
  std::uint32_t shared_cpu = 0;       // the processor the kept answer is for (mu)
  bool shared_answer = false;         // (mu)
  Clock::time_point shared_until{};   // (mu)
  Clock::time_point next_load{};      // background thread only
  int busy_looks = 0;                 // looks in a row that found it busy (background thread)
  bool stream_receives = false;  // large plain receives use non-temporal stores
  std::thread background;
  Clock::time_point next_liveness{};
  void look_at_load(Clock::time_point now);
  std::vector<std::byte> bounce;  // single copies consumed a piece at a time

  ShmRequest& of(const RequestPtr& r) const { return static_cast<ShmRequest&>(*r); }
  Peer& peer(int rank) { return peers[static_cast<std::size_t>(rank)]; }
  const Peer& peer(int rank) const { return peers[static_cast<std::size_t>(rank)]; }
  std::size_t slot_of(int rank) const;
  std::string describe_peer(int rank) const;
  std::string describe_request(const ShmRequest& r) const {
    return request_text(options.rank, r, describe_peer(r.peer()));
  }

  // ---- mailbox.cpp: set-up (mu not held unless said) ----
  void make_mailbox();
  // What this rank publishes: "<pid> <fd> <secret hex> <address>".
  std::string record() const;
  // Takes a peer's record in (mu held): its address, for messages.
  void learn(Peer& p, std::string record);
  // The peer's record: known, or read from the store; "" and `error` set if not.
  std::string find_record(int rank, Clock::time_point deadline, std::string& error);
  // Maps the peer's mailbox (mu held). An empty string, or why not.
  std::string attach(Peer& p, const std::string& record);
  // The peer's mailbox cannot be reached (mu held): what it wrote into
  // this rank's ring is still read, then its receives fail.
  void depart(Peer& p, const std::string& why);
  // Attaches to the peer, found Unattached: it ends Ready or Departed.
  void ensure_attached(int rank);
  // The lock a send or receive with `rank` is posted under, taken once the
  // peer is attached (or departed, or failed). Throws for a rank this
  // backend does not serve.
  std::unique_lock<std::mutex> lock_reached(int rank, std::string_view op);

  // ---- ring.cpp: the data path (mu held) ----
  void complete(ShmRequest& r);
  void fail(ShmRequest& r, ErrorKind kind, std::string message);
  void fail_for_peer(ShmRequest& r, ErrorKind kind, const std::string& reason);
  void fail_size_mismatch(ShmRequest& r, std::size_t sent, std::uint64_t print);
  // Fails the peer: every pending and later operation with it.
  void fail_peer(Peer& p, ErrorKind kind, const std::string& reason);
  // Writes what fits of the peer's queued sends into its ring.
  bool push(Peer& p);
  // With the ready words: marks this rank's bit in the peer's mailbox
  // (after its ring's write cursor moved); lists a peer with sends left.
  void mark_ready(Peer& p);
  void list_sending(Peer& p);
  // Copies bytes [from, from + n) of the message (header, payload, padding)
  // into the ring at the write cursor.
  void write_ring(Peer& p, const ShmRequest& r, std::size_t from, std::size_t n);
  // Reads what has arrived in the peer's ring.
  bool pull(Peer& p);
  // The header at the read cursor: finds the message's place, or leaves it
  // there (false) when it must wait for room in the unexpected queue.
  bool start_message(Peer& p);
  // Hands a piece of the payload to where it goes.
  void deliver(Peer& p, const std::byte* piece, std::size_t n);
  // A receive met a message its sender withdrew half-way.
  void withdrawn(ShmRequest& r);
  // Whether the sender withdrew the message being read (after this rank
  // began to read it): if so, its receive fails, or its queue entry goes,
  // and the rest is dropped as it comes.
  bool drop_if_withdrawn(Peer& p);
  // Takes the message being read out of the unexpected queue, if it was
  // going there: it will never be whole.
  void unqueue_partial(Peer& p);
  // Finishes the message being read; true if a receive completed.
  bool finish_message(Peer& p);
  // Posts a receive, taking a message already here.
  void post_recv(Peer& p, const ShmRequestPtr& r);
  // A send to oneself: copied at once, to its receive or into the queue.
  void send_to_self(ShmRequest& r);

  // ---- single_copy.cpp (mu held) ----
  // Reads a single-copy message from the sender's memory, a chunk at a
  // time, to where it goes; then tells the sender it may reuse its buffer.
  void read_remote(Peer& p);
  // process_vm_readv of n bytes; fails the peer if the kernel will not.
  bool read_from(Peer& p, std::uint64_t address, std::byte* into, std::size_t n);
  // Sends the receiver has read whole from this rank's memory.
  bool collect_acks(Peer& p);

  // ---- progress.cpp ----
  // One pass over every attached peer (mu held): what moved.
  bool progress_all();
  bool progress_ready();
  // Whether anything waits to be moved (a sleeper's last look; mu held).
  bool work_visible();
  // Peers whose process ended or who closed their transport fail, after
  // what they sent whole has been read (mu held).
  void check_liveness();
  // How long a wait spins before it sleeps (the setting, or none where
  // ranks crowd the processors).
  Clock::duration wait_spin() const;
  // Sleeps on this rank's bell until a peer rings it or `d` passes
  // (neither lock held).
  void sleep_on_bell(std::chrono::microseconds d);
  // Moves data until `r` is done, or `timeout` has passed; true if done.
  bool drive_until_done(const ShmRequest& r, std::chrono::milliseconds timeout);
  // The same until one of `requests` is done: its index, or -1.
  int drive_until_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout);
  void background_loop();
  // One turn of it while a watch lives (watch_for()).
  void watch_turn(std::uint32_t idle_seen);
  template <class Finished>
  bool drive(const Finished& finished, std::chrono::milliseconds timeout);

  // ---- shm_transport.cpp ----
  // How many ranks share this machine's processors (this host's at least):
  // `crowded`, `per_processor` and `machine_ranks` from them.
  void count_sharing(int ranks, int processors);
  // A wait ran out of time or was interrupted (mu held).
  void time_out(const RequestPtr& request, std::chrono::milliseconds limit, int signal);
};

}  // namespace collie::transport
