// The shared-memory backend (shm.hpp): mailboxes, rings, waits, liveness.
//
// Locks: one mutex (`mu`) guards every request, queue and ring cursor of
// this rank; `drive_mu` lets one thread drive at a time (others sleep on
// `done_cv`). The shared memory itself is read and written under `mu` on
// this side; the peer's side synchronises through the ring's head and
// tail (release/acquire) and the bell (a futex).
#include <collie/transport/shm.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <fstream>
#include <linux/futex.h>
#include <mutex>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/crypto.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/host_cpus.hpp>
#include <collie/interrupt.hpp>
#include <collie/log.hpp>

#include "../request_state.hpp"
#include "../tcp/tag_queues.hpp"
#include "ring_copy.hpp"

namespace collie::transport {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

constexpr std::uint64_t kMagic = 0x31766d6873696c63ULL;  // "clishmv1"
constexpr std::size_t kPage = 4096;
constexpr std::size_t kLine = 64;
constexpr std::size_t kHeaderBytes = 64;  // a message's header in the ring (32 used)
// Bytes a sender copies before it publishes them: the receiver copies out
// one piece while the sender copies in the next.
constexpr std::size_t kPiece = 32 * 1024;
// Each ring: a power of two, by how many ranks share the host
// (ring_bytes_for()). Where each rank has a core, both sides copy through
// a ring at once, and the larger it is, the less the two cores fight over
// its lines: one way, 64 MiB messages moved 11.9-18.1 GB/s through 2 MiB
// rings here, 8.8-10.9 through 1 MiB, 4.7-5.1 through 512 KiB; 4 MiB was
// no faster than 2 (docs/PERFORMANCE.md). Where ranks outnumber the cores
// they take turns, and 1 MiB (less to keep in the caches) made 4-rank
// all_reduce of 128 KiB-2 MiB 10-20% faster than 2 MiB. A rank's rings
// from all its peers take at most kRingBudget (no smaller than kRingLeast).
// (Starting a message at the ring's beginning again when the ring is empty,
// so that its lines stay in the caches, made 8 KiB-512 KiB all_reduce
// 1.4-2x slower: the other core had just read them.)
constexpr std::size_t kRingMost = std::size_t{2} << 20;
constexpr std::size_t kRingCrowded = std::size_t{1} << 20;
constexpr std::size_t kRingLeast = std::size_t{256} << 10;
constexpr std::size_t kRingBudget = std::size_t{64} << 20;
// What one process_vm_readv reads at most (the lock is held meanwhile).
constexpr std::size_t kRemoteChunk = 1 << 20;
// Header words: tag, sequence, length, fingerprint, kind, address.
constexpr std::uint64_t kInline = 0;  // the payload follows in the ring
constexpr std::uint64_t kRemote = 1;  // the payload is at `address` in the sender
// How often a wait looks whether its peers are alive.
constexpr auto kLivenessEvery = 10ms;
// The background thread leaves the rings to the callers until no request
// has finished for this long (as the TCP backend's).
constexpr auto kQuiet = 2ms;
// A sched_yield() that took this long ran another thread.
constexpr auto kYieldedAfter = std::chrono::microseconds(5);
constexpr auto kSharedSpin = 2ms;
// A plain receive of a message this large (a core's L2 cache holds 2 MiB
// here) is stored into its destination with non-temporal stores: one way,
// 16 MiB messages moved 10.4-11.0 GB/s against 7.8-8.0, and 4 MiB ones
// (which stay in the L3) alike both ways (docs/PERFORMANCE.md).
constexpr std::size_t kStreamReceivesFrom = std::size_t{8} << 20;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// The first page of a mailbox.
struct MailboxHeader {
  std::uint64_t magic;
  std::uint64_t group_id;
  std::uint64_t secret[2];
  std::uint32_t owner;
  std::uint32_t slots;
  std::uint64_t ring_bytes;
  std::uint64_t address;  // where the owner maps it (a peer's single-copy probe reads it there)
  alignas(kLine) std::atomic<std::uint32_t> bell;  // a futex: bumped to wake sleepers
  std::atomic<std::uint32_t> sleepers;
  alignas(kLine) std::atomic<std::uint32_t> closed;
};
static_assert(sizeof(MailboxHeader) <= kPage);

// The first page of each ring's slot: the cursors, each on its own line.
struct RingCursors {
  alignas(kLine) std::atomic<std::uint64_t> head;  // bytes written, by the sender
  alignas(kLine) std::atomic<std::uint64_t> tail;  // bytes read, by the receiver
  // Written by the receiver: single-copy messages it has read whole, and
  // whether it can read the sender's memory (0 not known yet, 1 yes, 2 no).
  alignas(kLine) std::atomic<std::uint64_t> acked;
  std::atomic<std::uint32_t> single_copy;
  // Set by either side when it gave up on the pair (a single-copy send
  // that timed out while the receiver may read it): the other fails the
  // pair too.
  std::atomic<std::uint32_t> broken;
  // Written by the sender: 1 + the sequence number of the last message it
  // withdrew half-way (its send timed out or was abandoned). The rest of
  // that message is filler; the receiver drops it, and the pair goes on.
  alignas(kLine) std::atomic<std::uint64_t> withdrawn;
};
static_assert(sizeof(RingCursors) <= kPage);

// Every rank of the host computes the same figure (the mailboxes of a
// host are alike): from how many ranks it has and how many processors its
// kernel has online, not from this process's own CPU affinity.
std::size_t ring_bytes_for(std::size_t ranks_here) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::size_t ring =
      cpus > 0 && ranks_here > static_cast<std::size_t>(cpus) ? kRingCrowded : kRingMost;
  while (ring > kRingLeast && ring * (std::max<std::size_t>(ranks_here, 2) - 1) > kRingBudget)
    ring /= 2;
  return ring;
}

std::size_t slot_bytes(std::size_t ring) {
  return kPage + ring;
}
std::size_t mailbox_bytes(std::size_t slots, std::size_t ring) {
  return kPage + slots * slot_bytes(ring);
}

std::uint32_t* futex_word(std::atomic<std::uint32_t>& a) {
  return reinterpret_cast<std::uint32_t*>(&a);
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t seen, std::chrono::microseconds d) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(d.count() / 1000000);
  ts.tv_nsec = static_cast<long>((d.count() % 1000000) * 1000);
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Wakes whoever sleeps on `h`'s bell, after this thread changed a cursor
// they may wait on. Pairs with sleep_on(): the fence orders the cursor's
// store before the load of `sleepers`.
void ring_bell(MailboxHeader& h) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h.sleepers.load(std::memory_order_relaxed) == 0) return;
  h.bell.fetch_add(1, std::memory_order_release);
  futex_wake(h.bell);
}

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Faults in a ring's pages now, writable, in this process's mapping:
// otherwise a message of 8 B would meet a fresh page every 32 messages
// for the first 4,000 (a fault and a zeroed page each, 1-2 us).
void populate(std::byte* ring, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(ring, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (std::size_t at = 0; at < bytes; at += kPage)  // older kernels: touch each page
    reinterpret_cast<volatile std::uint8_t*>(ring)[at] = 0;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

std::string read_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string namespace_of(const char* path) {
  char buf[128] = {};
  const auto n = ::readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
}

using ShmRequest = RequestState;  // nothing of its own beyond what every request has
using ShmRequestPtr = std::shared_ptr<ShmRequest>;

// A message that came before its receive.
struct Queued {
  std::vector<std::byte> data;
  std::uint64_t fingerprint = 0;
  std::size_t arrived = 0;
};
using QueuedPtr = std::shared_ptr<Queued>;

// A mapping of a mailbox (this rank's or a peer's).
struct Mapping {
  std::byte* base = nullptr;
  std::size_t length = 0;
  Mapping() = default;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() {
    if (base) ::munmap(base, length);
  }
  MailboxHeader& header() const { return *reinterpret_cast<MailboxHeader*>(base); }
  RingCursors& cursors(std::size_t slot) const {
    return *reinterpret_cast<RingCursors*>(base + kPage + slot * slot_bytes(header().ring_bytes));
  }
  std::byte* ring(std::size_t slot) const {
    return base + kPage + slot * slot_bytes(header().ring_bytes) + kPage;
  }
};

// Departed: its mailbox cannot be reached (it closed its transport or
// exited before this rank looked); what it wrote into this rank's ring can
// still be read, and then its receives fail.
enum class PeerState { Unattached, Ready, Departed, Failed };

struct Peer {
  int rank = 0;
  std::size_t slot = 0;  // its index among the host's ranks
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
  std::deque<ShmRequestPtr> sends;
  std::size_t send_done = 0;  // ring bytes of the front send written
  std::array<std::uint64_t, 6> send_header{};
  std::deque<ShmRequestPtr> in_flight;  // single-copy sends the receiver has not read yet
  std::uint64_t acks_seen = 0;
  std::uint64_t send_seq = 0;
  // Where the last message this rank withdrew ends in the ring (its write
  // cursor then): until the receiver has read that far, `withdrawn` names it.
  std::uint64_t withdrawn_end = 0;
  shm::RingCopier copier;  // ordinary or non-temporal stores, by what they cost
  // Receiving: its ring in my mailbox.
  RingCursors* in = nullptr;
  std::byte* in_ring = nullptr;
  std::uint64_t in_tail = 0;
  std::uint64_t recv_seq = 0;
  std::uint64_t reading_seq = 0;  // the sequence number of the message being read
  tcp::TagQueues<ShmRequestPtr> posted;
  tcp::TagQueues<QueuedPtr> unexpected;
  bool paused = false;  // the next message waits for room in the unexpected queue
  // The message being read.
  bool reading = false;
  std::size_t length = 0;     // its payload
  std::size_t read_done = 0;  // payload bytes read
  bool remote = false;        // it is in the sender's memory, at:
  std::uint64_t remote_address = 0;
  std::uint64_t acks_given = 0;  // single-copy messages read whole
  ShmRequestPtr target;       // the receive it goes to, or
  QueuedPtr queued;           // the queue entry, or neither: dropped
  Tag reading_tag = 0;        // its tag
  // Why it failed.
  ErrorKind failure_kind = ErrorKind::Connection;
  std::string failure;
};

}  // namespace

struct ShmTransport::Impl {
  TransportOptions options;
  std::shared_ptr<store::Store> store;
  std::vector<int> local;
  std::size_t ring_bytes = kRingMost;  // ring_bytes_for() the host's ranks
  int memfd = -1;
  Mapping mine;
  std::uint64_t secret[2] = {0, 0};
  std::vector<Peer> peers;

  mutable std::mutex mu;
  std::mutex drive_mu;
  std::mutex done_mu;
  std::condition_variable done_cv;
  std::atomic<int> waiters{0};
  std::atomic<std::uint32_t> idle_word{0};  // the background thread's futex (stop)
  std::atomic<std::int64_t> last_done{0};
  std::atomic<std::size_t> queued_count{0};
  std::size_t held = 0;  // unexpected bytes held (mu)
  std::atomic<bool> stopping{false};
  bool crowded = false;  // more ranks on this host than cores: waits yield
  bool stream_receives = false;  // large plain receives use non-temporal stores
  std::thread background;
  Clock::time_point next_liveness{};

  std::string key(int rank) const { return fmt::format("{}/shm/{}", options.group, rank); }
  ShmRequest& of(const RequestPtr& r) const { return static_cast<ShmRequest&>(*r); }
  Peer& peer(int rank) { return peers[static_cast<std::size_t>(rank)]; }
  const Peer& peer(int rank) const { return peers[static_cast<std::size_t>(rank)]; }

  std::string describe_peer(int rank) const {
    if (rank == options.rank) return fmt::format("rank {} (itself)", rank);
    const auto& p = peer(rank);
    if (!p.address.empty()) return fmt::format("rank {} at {} (shared memory)", rank, p.address);
    return fmt::format("rank {} (shared memory)", rank);
  }
  std::string describe_request(const ShmRequest& r) const {
    return request_text(options.rank, r, describe_peer(r.peer()));
  }

  // ---- finishing requests (mu held) ----
  void complete(ShmRequest& r) {
    r.state.store(static_cast<int>(State::Done), std::memory_order_release);
    last_done.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
    done_cv.notify_all();
  }
  void fail(ShmRequest& r, ErrorKind kind, std::string message) {
    if (!r.pending()) return;
    r.error_kind = kind;
    r.error = std::move(message);
    r.state.store(static_cast<int>(State::Failed), std::memory_order_release);
    done_cv.notify_all();
  }
  void fail_for_peer(ShmRequest& r, ErrorKind kind, const std::string& reason) {
    fail(r, kind, fmt::format("{} failed: {} ({})", describe_request(r), reason, progress_text(r)));
  }
  void fail_size_mismatch(ShmRequest& r, std::size_t sent, std::uint64_t print) {
    r.fingerprint = print;
    fail(r, ErrorKind::Request,
         size_mismatch_text(describe_request(r), describe_peer(r.peer()), sent, r.bytes));
  }

  // Fails the peer: every pending and later operation with it.
  void fail_peer(Peer& p, ErrorKind kind, const std::string& reason) {
    if (p.state == PeerState::Failed) return;
    p.state = PeerState::Failed;
    p.failure_kind = kind;
    p.failure = reason;
    for (auto& r : p.sends)
      fail_for_peer(*r, kind, reason);
    p.sends.clear();
    for (auto& r : p.in_flight)
      fail_for_peer(*r, kind, reason);
    p.in_flight.clear();
    if (p.out) p.out->broken.store(1, std::memory_order_release);
    if (p.in) p.in->broken.store(1, std::memory_order_release);
    p.posted.drain([&](const ShmRequestPtr& r) { fail_for_peer(*r, kind, reason); });
    if (p.target) fail_for_peer(*p.target, kind, reason);
    p.target.reset();
    unqueue_partial(p);  // a message it never finished: not deliverable
    p.reading = false;
    if (p.rank != options.rank && p.pid > 0)
      collie::log().debug("rank {}: {}", options.rank, reason);
  }

  // ---- set-up ----
  void make_mailbox() {
    memfd = ::memfd_create("collie-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (memfd < 0)
      throw Error(fmt::format("rank {}: shared memory: memfd_create failed: {}", options.rank,
                              std::strerror(errno)));
    const std::size_t length = mailbox_bytes(local.size(), ring_bytes);
    if (::fchmod(memfd, 0600) != 0 || ::ftruncate(memfd, static_cast<off_t>(length)) != 0)
      throw Error(fmt::format("rank {}: shared memory: cannot size a mailbox of {}: {}",
                              options.rank, plural_bytes(length), std::strerror(errno)));
    // Nobody may shrink it under a peer that maps it (a read past the end
    // would kill that peer with SIGBUS).
    ::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    void* base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (base == MAP_FAILED)
      throw Error(fmt::format("rank {}: shared memory: cannot map a mailbox of {}: {}",
                              options.rank, plural_bytes(length), std::strerror(errno)));
    mine.base = static_cast<std::byte*>(base);
    mine.length = length;
    secret[0] = crypto::random_u64();
    secret[1] = crypto::random_u64();
    auto& h = *new (mine.base) MailboxHeader{};
    h.magic = kMagic;
    h.group_id = options.group_id;
    h.secret[0] = secret[0];
    h.secret[1] = secret[1];
    h.owner = static_cast<std::uint32_t>(options.rank);
    h.slots = static_cast<std::uint32_t>(local.size());
    h.ring_bytes = ring_bytes;
    h.address = reinterpret_cast<std::uint64_t>(mine.base);
    for (std::size_t s = 0; s < local.size(); ++s)
      new (&mine.cursors(s)) RingCursors{};
  }

  std::string record() const {
    return fmt::format("{} {} {:016x}{:016x} {}", ::getpid(), memfd, secret[0], secret[1],
                       advertised.empty() ? "-" : advertised);
  }
  std::string advertised;

  // Takes a peer's record in (mu held): its address, for messages.
  void learn(Peer& p, std::string record) {
    p.published = std::move(record);
    const auto space = p.published.rfind(' ');
    if (space != std::string::npos && p.published.substr(space + 1) != "-")
      p.address = p.published.substr(space + 1);
  }

  // The peer's record: known, or read from the store (mu not held).
  std::string find_record(int rank, Clock::time_point deadline, std::string& error) {
    {
      std::lock_guard lock(mu);
      if (!peer(rank).published.empty()) return peer(rank).published;
    }
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      auto value = store->get(key(rank), std::max(left, 1ms));
      std::lock_guard lock(mu);
      learn(peer(rank), value);
      return value;
    } catch (const TimeoutError&) {
      error = fmt::format(
          "rank {} never published its shared-memory mailbox (store key '{}') within {}: did it "
          "start and join the group?",
          rank, key(rank), describe_duration(options.timeout));
    } catch (const Error& e) {
      error = fmt::format("could not look up rank {}'s mailbox in the store: {}", rank, e.what());
    }
    return "";
  }

  // Maps the peer's mailbox (mu held). An empty string, or why not.
  std::string attach(Peer& p, const std::string& record) {
    unsigned long long pid = 0, fd = 0;
    char hex[33] = {};
    if (std::sscanf(record.c_str(), "%llu %llu %32s ", &pid, &fd, hex) != 3 ||
        std::strlen(hex) != 32)
      return fmt::format("its store record '{}' is not \"<pid> <fd> <secret>\"", record);
    const std::uint64_t want[2] = {std::stoull(std::string(hex, 16), nullptr, 16),
                                   std::stoull(std::string(hex + 16, 16), nullptr, 16)};
    p.pid = static_cast<pid_t>(pid);
    // The pidfd first: if the process is already gone and its pid reused,
    // the mailbox opened next is another's, and its secret differs.
    p.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0));
    if (p.pidfd < 0)
      return fmt::format("its process ended (it exited or was killed; pid {}: {})", pid,
                         std::strerror(errno));
    const std::string path = fmt::format("/proc/{}/fd/{}", pid, fd);
    const int f = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (f < 0 && (errno == ENOENT || errno == ESRCH)) {
      // A process that is ending has closed its files before its pidfd
      // says it exited: give it a moment to tell the two apart.
      pollfd exited{p.pidfd, POLLIN, 0};
      if (::poll(&exited, 1, 200) > 0) return "its process ended (it exited or was killed)";
      return fmt::format("it has closed its transport (its mailbox {} is gone)", path);
    }
    if (f < 0)
      return fmt::format(
          "cannot open its mailbox {} ({}): ranks of one host must run as the same user in the "
          "same PID namespace; COLLIE_TRANSPORT=tcp avoids shared memory",
          path, std::strerror(errno));
    struct stat st {};
    const std::size_t want_length = mailbox_bytes(local.size(), ring_bytes);
    if (::fstat(f, &st) != 0 || static_cast<std::size_t>(st.st_size) != want_length) {
      ::close(f);
      return fmt::format("its mailbox {} is not one of this group's (size {})", path,
                         static_cast<long long>(st.st_size));
    }
    void* base = ::mmap(nullptr, want_length, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
    ::close(f);
    if (base == MAP_FAILED)
      return fmt::format("cannot map its mailbox: {}", std::strerror(errno));
    auto m = std::make_unique<Mapping>();
    m->base = static_cast<std::byte*>(base);
    m->length = want_length;
    const auto& h = m->header();
    if (h.magic != kMagic || h.secret[0] != want[0] || h.secret[1] != want[1] ||
        h.group_id != options.group_id || h.owner != static_cast<std::uint32_t>(p.rank) ||
        h.slots != local.size() || h.ring_bytes != ring_bytes)
      return fmt::format("the memory at {} is not its mailbox for this group (its process "
                         "may have exited and the pid been reused)",
                         path);
    p.theirs = std::move(m);
    const auto me = slot_of(options.rank);
    p.out = &p.theirs->cursors(me);
    p.out_ring = p.theirs->ring(me);
    p.out_head = p.out->head.load(std::memory_order_relaxed);
    // Both views of the two rings of the pair (the peer's mapping of its
    // own it faults in when it attaches to this rank).
    populate(p.out_ring, ring_bytes);
    populate(p.in_ring, ring_bytes);
    // Can this rank read the peer's memory? The kernel's ptrace rules
    // decide (same user; Yama's ptrace_scope; containers): read its magic.
    // (Only asked when single copies are on: the ring is faster here.)
    std::uint64_t magic = 0;
    ssize_t got = -1;
    errno = 0;
    if (options.single_copy_from > 0) {
      iovec here{&magic, sizeof magic};
      iovec there{reinterpret_cast<void*>(h.address), sizeof magic};
      got = ::process_vm_readv(p.pid, &here, 1, &there, 1, 0);
    }
    const bool single = got == static_cast<ssize_t>(sizeof magic) && magic == kMagic;
    p.in->single_copy.store(single ? 1 : 2, std::memory_order_release);
    if (options.single_copy_from == 0) {
      collie::log().debug("rank {}: reads messages from {} through the ring (two copies)",
                          options.rank, describe_peer(p.rank));
    } else if (single) {
      collie::log().debug("rank {}: reads large messages from {} with one copy (process_vm_readv)",
                          options.rank, describe_peer(p.rank));
    } else {
      collie::log().info(
          "rank {}: reads messages from {} through the ring (two copies): process_vm_readv is "
          "not permitted ({})",
          options.rank, describe_peer(p.rank), got < 0 ? std::strerror(errno) : "wrong bytes");
    }
    p.state = PeerState::Ready;
    attached.push_back(p.rank);
    return "";
  }
  std::vector<int> attached;  // ranks Ready or failed after being attached

  std::size_t slot_of(int rank) const {
    return static_cast<std::size_t>(std::lower_bound(local.begin(), local.end(), rank) -
                                    local.begin());
  }

  // The peer's mailbox cannot be reached (mu held): what it wrote into this
  // rank's ring is still read, then its receives fail (check_liveness).
  void depart(Peer& p, const std::string& why) {
    p.state = PeerState::Departed;
    p.failure_kind = ErrorKind::Connection;
    p.failure = fmt::format("no shared memory with {}: {}", describe_peer(p.rank), why);
    attached.push_back(p.rank);
  }

  // Attaches to the peer, found Unattached (mu not held): it ends Ready or
  // Departed.
  void ensure_attached(int rank) {
    std::string error;
    const auto record = find_record(rank, Clock::now() + options.timeout, error);
    std::lock_guard lock(mu);
    auto& p = peer(rank);
    if (p.state != PeerState::Unattached) return;
    if (error.empty()) error = attach(p, record);
    if (!error.empty()) {
      depart(p, error);
      return;
    }
    collie::log().debug("rank {}: attached to {}", options.rank, describe_peer(rank));
  }

  // The lock a send or receive with `rank` is posted under, taken once
  // the peer is attached (or departed, or failed). Throws for a rank this
  // backend does not serve.
  std::unique_lock<std::mutex> lock_reached(int rank, std::string_view op) {
    std::unique_lock lock(mu);
    if (rank == options.rank) return lock;
    if (!peer(rank).local)
      throw Error(fmt::format("rank {}: {} rank {}: it is not on this host, and shared memory "
                              "reaches only the ranks of this host ({})",
                              options.rank, op, rank, fmt::join(local, ", ")));
    if (peer(rank).state == PeerState::Unattached) {
      lock.unlock();  // the store and /proc, outside the lock
      ensure_attached(rank);
      lock.lock();
    }
    return lock;
  }

  // ---- the data path (mu held) ----

  // Writes what fits of the peer's queued sends into its ring.
  bool push(Peer& p) {
    bool wrote = false;
    while (!p.sends.empty()) {
      auto& r = *p.sends.front();
      const std::size_t total = kHeaderBytes + round_up(r.bytes, kLine);
      const std::uint64_t tail = p.out->tail.load(std::memory_order_acquire);
      const std::uint64_t used = p.out_head - tail;
      if (used > ring_bytes) {
        fail_peer(p, ErrorKind::Protocol,
                  fmt::format("{} broke the shared-memory protocol (its ring's read cursor is "
                              "ahead of the write cursor)",
                              describe_peer(p.rank)));
        return wrote;
      }
      std::size_t room = ring_bytes - used;
      if (room == 0) break;
      if (p.send_done == 0 && options.single_copy_from > 0 && r.bytes >= options.single_copy_from &&
          p.out->single_copy.load(std::memory_order_acquire) == 1) {
        // The header alone: the receiver reads the payload from here.
        p.send_header = {r.tag, p.send_seq++, r.bytes, r.fingerprint, kRemote,
                         reinterpret_cast<std::uint64_t>(r.data)};
        write_ring(p, r, 0, kHeaderBytes);
        p.out_head += kHeaderBytes;
        p.out->head.store(p.out_head, std::memory_order_release);
        wrote = true;
        p.in_flight.push_back(std::move(p.sends.front()));
        p.sends.pop_front();
        continue;
      }
      if (p.send_done == 0) {
        p.send_header = {r.tag, p.send_seq++, r.bytes, r.fingerprint, kInline, 0};
      }
      while (room > 0 && p.send_done < total) {  // room and total: multiples of kLine
        const std::size_t n = std::min({room, total - p.send_done, kPiece});
        write_ring(p, r, p.send_done, n);
        p.send_done += n;
        p.out_head += n;
        room -= n;
        p.out->head.store(p.out_head, std::memory_order_release);
      }
      wrote = true;
      r.moved = std::min(r.bytes, p.send_done > kHeaderBytes ? p.send_done - kHeaderBytes : 0);
      if (p.send_done < total) break;
      p.send_done = 0;
      auto done = std::move(p.sends.front());
      p.sends.pop_front();
      complete(*done);
    }
    if (wrote) ring_bell(p.theirs->header());
    return wrote;
  }

  // Copies bytes [from, from + n) of the message (header, payload, padding)
  // into the ring at the write cursor.
  void write_ring(Peer& p, const ShmRequest& r, std::size_t from, std::size_t n) {
    std::size_t at = static_cast<std::size_t>(p.out_head % ring_bytes);
    while (n > 0) {
      const std::size_t span = std::min(n, ring_bytes - at);
      std::byte* dst = p.out_ring + at;
      std::size_t done = 0;
      while (done < span) {
        const std::size_t pos = from + done;
        std::size_t k = 0;
        if (pos < kHeaderBytes) {
          k = std::min(span - done, kHeaderBytes - pos);
          std::array<std::byte, kHeaderBytes> h{};
          std::memcpy(h.data(), p.send_header.data(), sizeof p.send_header);
          std::memcpy(dst + done, h.data() + pos, k);
        } else if (pos < kHeaderBytes + r.bytes) {
          k = std::min(span - done, kHeaderBytes + r.bytes - pos);
          // (A withdrawn message's rest has no source: filler.)
          if (r.data != nullptr) p.copier.copy(dst + done, r.data + (pos - kHeaderBytes), k);
        } else {
          k = span - done;  // padding: its contents do not matter
        }
        done += k;
      }
      from += span;
      n -= span;
      at = 0;
    }
  }

  // Reads what has arrived in the peer's ring.
  bool pull(Peer& p) {
    bool read = false;
    for (;;) {
      const std::uint64_t head = p.in->head.load(std::memory_order_acquire);
      const std::uint64_t avail = head - p.in_tail;
      if (avail > ring_bytes || avail % kLine != 0) {
        fail_peer(p, ErrorKind::Protocol,
                  fmt::format("{} broke the shared-memory protocol (a write cursor out of "
                              "place)",
                              describe_peer(p.rank)));
        break;
      }
      if (!p.reading) {
        if (avail < kHeaderBytes || !start_message(p)) break;
        read = true;
        continue;
      }
      if (p.remote) {
        read_remote(p);
        read = true;
        continue;
      }
      const std::size_t padded = round_up(p.length, kLine);
      // A piece at a time, giving the room back after each: the sender
      // copies into it while this rank copies out the next.
      const std::size_t n = std::min<std::size_t>({avail, padded - p.read_done, kPiece});
      if (n == 0 && padded != p.read_done) break;
      if (p.target || p.queued) drop_if_withdrawn(p);
      // The payload in the ring: up to two pieces (the ring wraps).
      std::size_t at = static_cast<std::size_t>(p.in_tail % ring_bytes);
      std::size_t left = n;
      while (left > 0) {
        const std::size_t span = std::min(left, ring_bytes - at);
        const std::size_t payload =
            p.read_done < p.length ? std::min(span, p.length - p.read_done) : 0;
        if (payload > 0) deliver(p, p.in_ring + at, payload);
        p.read_done += span;
        left -= span;
        at = 0;
      }
      p.in_tail += n;
      p.in->tail.store(p.in_tail, std::memory_order_release);
      read = true;
      // A receive done: its waiter may post the next before this pass
      // reads on (a message with no receive yet is copied twice).
      if (p.read_done >= padded && finish_message(p)) break;
    }
    if (read) {
      p.in->tail.store(p.in_tail, std::memory_order_release);
      // A sender this rank has not attached to yet: attach now (its record
      // is known after prefetch()), so that it is woken when it waits for room.
      if (!p.theirs && p.state == PeerState::Unattached && !p.published.empty()) {
        if (const auto error = attach(p, p.published); !error.empty()) depart(p, error);
      }
      if (p.theirs) ring_bell(p.theirs->header());
    }
    return read;
  }

  // Reads a single-copy message from the sender's memory, a chunk at a
  // time, to where it goes; then tells the sender it may reuse its buffer.
  void read_remote(Peer& p) {
    while (p.reading && p.state == PeerState::Ready) {
      const std::size_t offset = p.read_done;
      const std::size_t n = std::min(kRemoteChunk, p.length - offset);
      std::byte* into = nullptr;
      if (p.target && !p.target->consume) {
        into = p.target->data + offset;
      } else if (p.queued) {
        into = p.queued->data.data() + offset;
      }
      if (p.target && p.target->consume) {
        // Through a buffer that stays in cache, a piece at a time.
        if (bounce.empty()) bounce.resize(kPiece);
        for (std::size_t done = 0; done < n && p.target;) {
          const std::size_t k = std::min(kPiece, n - done);
          if (!read_from(p, p.remote_address + offset + done, bounce.data(), k)) return;
          p.read_done = offset + done;
          deliver(p, bounce.data(), k);
          done += k;
        }
      } else if (into && n > 0) {
        if (!read_from(p, p.remote_address + offset, into, n)) return;
        if (p.target) p.target->moved = offset + n;
        if (p.queued) p.queued->arrived = offset + n;
      }
      p.read_done = offset + n;
      if (p.read_done >= p.length) {
        finish_message(p);
        p.in->acked.store(++p.acks_given, std::memory_order_release);
      }
    }
  }
  std::vector<std::byte> bounce;

  // process_vm_readv of n bytes; fails the peer if the kernel will not.
  bool read_from(Peer& p, std::uint64_t address, std::byte* into, std::size_t n) {
    std::size_t done = 0;
    while (done < n) {
      iovec here{into + done, n - done};
      iovec there{reinterpret_cast<void*>(address + done), n - done};
      const auto got = ::process_vm_readv(p.pid, &here, 1, &there, 1, 0);
      if (got <= 0) {
        const int e = errno;
        if (got < 0 && e == EINTR) continue;
        fail_peer(p, ErrorKind::Protocol,
                  fmt::format("could not read a message of {} from the memory of {}: {}",
                              plural_bytes(p.length), describe_peer(p.rank),
                              got < 0 ? std::strerror(e) : "nothing read"));
        return false;
      }
      done += static_cast<std::size_t>(got);
    }
    return true;
  }

  // Sends the receiver has read whole from this rank's memory.
  bool collect_acks(Peer& p) {
    if (p.in_flight.empty()) return false;
    const std::uint64_t acks = p.out->acked.load(std::memory_order_acquire);
    bool any = false;
    while (p.acks_seen < acks && !p.in_flight.empty()) {
      ++p.acks_seen;
      auto r = std::move(p.in_flight.front());
      p.in_flight.pop_front();
      r->moved = r->bytes;
      complete(*r);
      any = true;
    }
    return any;
  }

  // The header at the read cursor: finds the message's place, or leaves it
  // there (false) when it must wait for room in the unexpected queue.
  bool start_message(Peer& p) {
    std::array<std::uint64_t, 6> h{};
    const std::size_t at = static_cast<std::size_t>(p.in_tail % ring_bytes);
    std::memcpy(h.data(), p.in_ring + at, sizeof h);  // never wraps: at is a multiple of 64
    const Tag tag = h[0];
    const std::uint64_t seq = h[1];
    const std::uint64_t length = h[2];
    const std::uint64_t print = h[3];
    const std::uint64_t kind = h[4];
    if (kind != kInline && kind != kRemote) {
      fail_peer(p, ErrorKind::Protocol,
                fmt::format("{} broke the shared-memory protocol (a message of kind {})",
                            describe_peer(p.rank), kind));
      return false;
    }
    if (seq != p.recv_seq) {
      fail_peer(p, ErrorKind::Protocol,
                fmt::format("{} broke the shared-memory protocol (message {} came where {} was "
                            "due)",
                            describe_peer(p.rank), seq, p.recv_seq));
      return false;
    }
    auto r = p.posted.take_first(tag);
    if (p.in->withdrawn.load(std::memory_order_acquire) == seq + 1) {
      // Withdrawn half-way by the sender: dropped as it comes.
      if (r) withdrawn(*r);
    } else if (!r) {
      if (held + length > options.max_unexpected_bytes && length > 0) {
        p.paused = true;
        return false;
      }
      p.paused = false;
      auto q = std::make_shared<Queued>();
      q->data.resize(length);
      q->fingerprint = print;
      p.unexpected.push(tag, q);
      held += length;
      ++queued_count;
      p.queued = std::move(q);
    } else if (r->bytes != length) {
      fail_size_mismatch(*r, length, print);  // read and dropped
    } else {
      r->fingerprint = print;
      p.target = std::move(r);
    }
    p.paused = false;
    p.reading_seq = p.recv_seq++;
    p.reading_tag = tag;
    p.in_tail += kHeaderBytes;
    p.reading = true;
    p.length = length;
    p.read_done = 0;
    p.remote = kind == kRemote;
    p.remote_address = h[5];
    if (length == 0) finish_message(p);
    return true;
  }

  // Hands a piece of the payload to where it goes.
  void deliver(Peer& p, const std::byte* piece, std::size_t n) {
    const std::size_t offset = p.read_done;
    if (p.target) {
      auto& r = *p.target;
      if (r.consume) {
        try {
          r.consume(offset, std::span<const std::byte>(piece, n));
        } catch (const std::exception& e) {
          fail(r, ErrorKind::Request,
               fmt::format("{} failed: its consumer threw at byte {}: {} (the rest of the "
                           "message was dropped)",
                           describe_request(r), offset, e.what()));
          p.target.reset();
          return;
        }
      } else if (stream_receives && p.length >= kStreamReceivesFrom) {
        // A message this large leaves the caches anyway: storing it around
        // them saves reading every line of the destination first.
        shm::stream_copy(r.data + offset, piece, n);
      } else {
        std::memcpy(r.data + offset, piece, n);
      }
      r.moved = offset + n;
    } else if (p.queued) {
      std::memcpy(p.queued->data.data() + offset, piece, n);
      p.queued->arrived = offset + n;
    }
  }

  // A receive met a message its sender withdrew half-way.
  void withdrawn(ShmRequest& r) {
    fail(r, ErrorKind::Request,
         fmt::format("{} failed: {} withdrew its message half-way (its send timed out or its "
                     "collective was abandoned); what came of it was dropped",
                     describe_request(r), describe_peer(r.peer())));
  }

  // Whether the sender withdrew the message being read (after this rank
  // began to read it): if so, its receive fails, or its queue entry goes,
  // and the rest is dropped as it comes.
  bool drop_if_withdrawn(Peer& p) {
    if (p.length == 0 || p.in->withdrawn.load(std::memory_order_acquire) != p.reading_seq + 1)
      return false;
    if (p.target) withdrawn(*p.target);
    p.target.reset();
    unqueue_partial(p);
    return true;
  }

  // Takes the message being read out of the unexpected queue, if it was
  // going there: it will never be whole.
  void unqueue_partial(Peer& p) {
    if (!p.queued) return;
    p.unexpected.erase(p.reading_tag, p.queued);
    held -= p.queued->data.size();
    --queued_count;
    p.queued.reset();
  }

  // Finishes the message being read; true if a receive completed.
  bool finish_message(Peer& p) {
    p.reading = false;
    if (drop_if_withdrawn(p)) return false;
    bool received = false;
    if (p.target) {
      p.target->moved = p.length;
      complete(*p.target);
      p.target.reset();
      received = true;
    }
    if (p.queued) {
      p.queued->arrived = p.length;
      p.queued.reset();
    }
    return received;
  }

  // Posts a receive, taking a message already here (mu held).
  void post_recv(Peer& p, const ShmRequestPtr& r) {
    auto q = p.unexpected.take_first(r->tag);
    if (!q) {
      p.posted.push(r->tag, r);
      return;
    }
    held -= q->data.size();
    --queued_count;
    r->fingerprint = q->fingerprint;
    if (q->data.size() != r->bytes) {
      if (p.queued == q) p.queued.reset();  // the rest is dropped as it comes
      fail_size_mismatch(*r, q->data.size(), q->fingerprint);
      return;
    }
    if (q->arrived > 0) {
      if (r->consume) {
        try {
          r->consume(0, std::span<const std::byte>(q->data.data(), q->arrived));
        } catch (const std::exception& e) {
          if (p.queued == q) p.queued.reset();
          fail(*r, ErrorKind::Request,
               fmt::format("{} failed: its consumer threw at byte 0: {} (the rest of the message "
                           "was dropped)",
                           describe_request(*r), e.what()));
          return;
        }
      } else {
        std::memcpy(r->data, q->data.data(), q->arrived);
      }
    }
    r->moved = q->arrived;
    if (p.queued == q) {  // still arriving: the rest goes to the receive
      p.queued.reset();
      p.target = r;
      return;
    }
    complete(*r);
  }

  // A send to oneself: copied at once, to its receive or into the queue.
  void send_to_self(ShmRequest& r) {
    auto& p = peer(options.rank);
    if (auto target = p.posted.take_first(r.tag)) {
      target->fingerprint = r.fingerprint;
      if (target->bytes != r.bytes) {
        fail_size_mismatch(*target, r.bytes, r.fingerprint);
      } else {
        if (target->consume) {
          try {
            target->consume(0, std::span<const std::byte>(r.data, r.bytes));
            target->moved = r.bytes;
            complete(*target);
          } catch (const std::exception& e) {
            fail(*target, ErrorKind::Request,
                 fmt::format("{} failed: its consumer threw at byte 0: {}",
                             describe_request(*target), e.what()));
          }
        } else {
          if (r.bytes > 0) std::memcpy(target->data, r.data, r.bytes);
          target->moved = r.bytes;
          complete(*target);
        }
      }
    } else {
      auto q = std::make_shared<Queued>();
      q->data.assign(r.data, r.data + r.bytes);
      q->fingerprint = r.fingerprint;
      q->arrived = r.bytes;
      held += r.bytes;
      ++queued_count;
      p.unexpected.push(r.tag, std::move(q));
    }
    r.moved = r.bytes;
    complete(r);
  }

  // ---- progress ----

  // One pass over every attached peer (mu held): what moved.
  bool progress_all() {
    bool moved = false;
    // Every ring into this mailbox is read, also from peers this rank has
    // not attached to yet: a message under a tag it waits for may come
    // from a rank it did not expect (a mismatch the executor must see).
    for (int rank : local) {
      auto& p = peer(rank);
      if (rank == options.rank || p.state == PeerState::Failed) continue;
      if (p.state == PeerState::Ready) {
        if (!p.sends.empty()) moved = push(p) || moved;
        moved = collect_acks(p) || moved;
      }
      moved = pull(p) || moved;
    }
    return moved;
  }

  // Whether anything waits to be moved (a sleeper's last look).
  bool work_visible() {
    for (int rank : local) {
      auto& p = peer(rank);
      if (rank == options.rank || p.state == PeerState::Failed) continue;
      if (p.in->head.load(std::memory_order_acquire) != p.in_tail && !p.paused) return true;
      if (p.state != PeerState::Ready) continue;
      if (!p.sends.empty() &&
          p.out_head - p.out->tail.load(std::memory_order_acquire) < ring_bytes)
        return true;
      if (!p.in_flight.empty() && p.out->acked.load(std::memory_order_acquire) != p.acks_seen)
        return true;
    }
    return false;
  }

  // Peers whose process ended or who closed their transport fail, after
  // what they sent whole has been read (mu held).
  void check_liveness() {
    // pull() stops after each receive it completes (its waiter may post the
    // next); before a peer is failed, every message it wrote whole must be
    // taken in: the receives posted, and the rest queued.
    const auto drain = [this](Peer& p) {
      while (pull(p)) {
      }
    };
    for (int rank : attached) {
      auto& p = peer(rank);
      if (p.state == PeerState::Departed) {
        drain(p);
        if (p.state == PeerState::Departed &&
            p.in->head.load(std::memory_order_acquire) == p.in_tail) {
          const std::string why = p.failure;
          fail_peer(p, p.failure_kind, why);
        }
        continue;
      }
      if (p.state != PeerState::Ready) continue;
      pollfd f{p.pidfd, POLLIN, 0};
      const bool gone = ::poll(&f, 1, 0) > 0;
      const bool closed = p.theirs->header().closed.load(std::memory_order_acquire) != 0;
      const bool broken = p.in->broken.load(std::memory_order_acquire) != 0 ||
                          p.out->broken.load(std::memory_order_acquire) != 0;
      if (!gone && !closed && !broken) continue;
      drain(p);  // what it sent before it went
      if (p.state != PeerState::Ready) continue;
      if (broken && !gone && !closed) {
        fail_peer(p, ErrorKind::Connection,
                  fmt::format("{} gave up on its shared-memory channel with this rank (a send "
                              "timed out half-way through a message it could not withdraw)",
                              describe_peer(rank)));
      } else if (gone) {
        fail_peer(p, ErrorKind::Connection,
                  fmt::format("{} is gone: its process ended (it exited or was killed)",
                              describe_peer(rank)));
      } else {
        fail_peer(p, ErrorKind::Connection,
                  fmt::format("{} closed its transport (its group was destroyed or its process "
                              "is ending)",
                              describe_peer(rank)));
      }
    }
  }

  // Sleeps on this rank's bell until a peer rings it or `d` passes
  // (neither lock held).
  void sleep_on_bell(std::chrono::microseconds d) {
    auto& h = mine.header();
    h.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const std::uint32_t seen = h.bell.load(std::memory_order_acquire);
    bool work = false;
    {
      std::lock_guard lock(mu);
      work = work_visible();
    }
    if (!work) futex_wait(h.bell, seen, d);
    h.sleepers.fetch_sub(1, std::memory_order_relaxed);
  }

  // Moves data until finished() or `timeout` has passed (the clock is read
  // only once the request is found unfinished: a small collective's waits
  // mostly find it done).
  template <class Finished>
  bool drive(const Finished& finished, std::chrono::milliseconds timeout) {
    if (finished()) return true;
    ++waiters;
    struct Leave {
      std::atomic<int>& w;
      ~Leave() { --w; }
    } leave{waiters};
    const auto began = Clock::now();
    const auto deadline = began + timeout;
    auto now = began;
    auto spin_until = began + options.spin;
    const auto spin_limit = began + std::max<Clock::duration>(options.spin, kSharedSpin);
    auto next_check = began + kLivenessEvery;
    // A wait with no time left still moves what is ready, once (a caller
    // that waits on several backends in turn polls each so).
    bool once = deadline <= began;
    unsigned turn = 0;
    for (bool first = true; !finished(); first = false) {
      if (!first) now = Clock::now();
      if ((now >= deadline && !once) || waits_interrupted() != 0) break;
      std::unique_lock drive_lock(drive_mu, std::try_to_lock);
      if (!drive_lock.owns_lock()) {
        if (once) break;  // another thread drives
        // Another thread drives (the background thread, a moment, or
        // another waiter): yield while spinning, then sleep until a
        // request finishes.
        if (now < spin_until) {
          sched_yield();
          continue;
        }
        std::unique_lock lock(done_mu);
        done_cv.wait_for(lock, 1ms);
        continue;
      }
      // Spinning: reading the rings costs a few loads, so the turn is
      // short. Where every rank of the host has a core, it neither yields
      // nor reads the clock every turn (both cost more than the turn);
      // where ranks outnumber cores, it yields each turn so that the rank
      // it waits for runs.
      for (;;) {
        bool moved = false;
        {
          std::lock_guard lock(mu);
          moved = progress_all();
          if (now >= next_check) {
            next_check = now + kLivenessEvery;
            check_liveness();
          }
        }
        if (finished() || once) return finished();
        if (moved) {
          spin_until = std::max(spin_until, now + options.spin);
        } else if (crowded) {
          sched_yield();
          const auto after = Clock::now();
          if (after - now > kYieldedAfter)
            spin_until = std::min(spin_limit, std::max(spin_until, after + options.spin));
          now = after;
        } else {
          cpu_relax();
        }
        if (crowded || (++turn & 15) == 0) {
          if (!crowded) now = Clock::now();
          if (now >= deadline || waits_interrupted() != 0) return finished();
          if (now >= spin_until) break;
        }
      }
      now = Clock::now();
      const auto until = std::min({deadline, next_check});
      if (until > now) {
        drive_lock.unlock();
        sleep_on_bell(std::chrono::duration_cast<std::chrono::microseconds>(until - now) + 1us);
      }
    }
    return finished();
  }

  void background_loop() {
    while (!stopping.load()) {
      const auto now = Clock::now();
      const auto quiet_from =
          Clock::time_point(Clock::duration(last_done.load(std::memory_order_relaxed))) + kQuiet;
      if (waiters.load() == 0 && now >= quiet_from) {
        std::unique_lock drive_lock(drive_mu, std::try_to_lock);
        if (drive_lock.owns_lock()) {
          std::lock_guard lock(mu);
          while (progress_all()) {
          }
          if (now >= next_liveness) {
            next_liveness = now + 100ms;
            check_liveness();
          }
        }
        if (stopping.load()) break;
        sleep_on_bell(50ms);
      } else {
        // Callers move the data now: sleep until they have been quiet for
        // kQuiet, or, while they wait, for a while (never on done_cv: it
        // is notified at every finished request).
        const auto d = waiters.load() == 0
                           ? std::chrono::duration_cast<std::chrono::microseconds>(quiet_from - now)
                           : std::chrono::microseconds(20ms);
        auto& word = idle_word;
        futex_wait(word, word.load(), std::max(d, std::chrono::microseconds(100)));
      }
    }
  }

  // A wait ran out of time or was interrupted (mu held).
  void time_out(const RequestPtr& request, std::chrono::milliseconds limit, int signal) {
    auto& r = of(request);
    auto& p = peer(r.peer());
    std::string why = timeout_text(describe_request(r), progress_text(r), limit, signal);
    if (!r.is_send && p.paused)
      why += paused_text(describe_peer(r.peer()), held, options.max_unexpected_bytes);
    auto self = std::static_pointer_cast<ShmRequest>(request);
    bool half_way_send = false;
    bool withdraw = false;
    if (r.is_send) {
      auto it = std::find(p.sends.begin(), p.sends.end(), self);
      if (std::find(p.in_flight.begin(), p.in_flight.end(), self) != p.in_flight.end()) {
        half_way_send = true;  // the receiver may be reading it from this rank's memory
      } else if (it != p.sends.end()) {
        withdraw = it == p.sends.begin() && p.send_done > 0;
        if (!withdraw) p.sends.erase(it);
        // One withdrawn message unread at a time: `withdrawn` names one.
        if (withdraw && p.out->tail.load(std::memory_order_acquire) < p.withdrawn_end) {
          withdraw = false;
          half_way_send = true;
        }
      }
    } else if (p.target == self) {
      p.target.reset();  // the rest of its message is dropped as it comes
    } else {
      p.posted.erase(r.tag, self);
    }
    if (withdraw)
      why += fmt::format("; the part already written was withdrawn ({} drops it, and the pair "
                         "goes on)",
                         describe_peer(r.peer()));
    fail(r, ErrorKind::Timeout, why);
    if (withdraw) {
      // Its rest is written as filler (the caller's buffer is the caller's
      // again), and the receiver told to drop the message: the pair goes on.
      p.out->withdrawn.store(p.send_header[1] + 1, std::memory_order_release);
      p.sends.front() =
          std::make_shared<ShmRequest>(r.peer(), true, r.tag, nullptr, r.bytes, r.fingerprint);
      p.withdrawn_end = p.out_head + (kHeaderBytes + round_up(r.bytes, kLine) - p.send_done);
      push(p);
    }
    if (half_way_send) {
      if (!p.sends.empty() && p.sends.front() == self) p.sends.pop_front();
      std::erase(p.in_flight, self);
      fail_peer(p, ErrorKind::Connection,
                fmt::format("the shared-memory channel to {} was closed after a send timed out "
                            "half-way through a message it could not withdraw (one read from "
                            "this rank's memory, or one more before {} read the last withdrawn)",
                            describe_peer(r.peer()), describe_peer(r.peer())));
    }
  }
};

std::string shared_memory_unusable() {
  const int fd = ::memfd_create("collie-shm-probe", MFD_CLOEXEC);
  if (fd < 0) return fmt::format("memfd_create failed: {}", std::strerror(errno));
  std::string why;
  if (::ftruncate(fd, static_cast<off_t>(kPage)) != 0) {
    why = fmt::format("a memory file cannot be sized: {}", std::strerror(errno));
  } else if (const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
             pidfd < 0) {
    why = fmt::format("pidfd_open failed: {}", std::strerror(errno));
  } else {
    ::close(pidfd);
    const std::string path = fmt::format("/proc/{}/fd/{}", ::getpid(), fd);
    const int again = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (again < 0) {
      why = fmt::format("{} cannot be opened: {}", path, std::strerror(errno));
    } else {
      void* m = ::mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, again, 0);
      if (m == MAP_FAILED)
        why = fmt::format("a memory file cannot be mapped: {}", std::strerror(errno));
      else
        ::munmap(m, kPage);
      ::close(again);
    }
  }
  ::close(fd);
  return why;
}

std::string host_identity() {
  if (const char* forced = std::getenv("COLLIE_HOST_ID"); forced && *forced) return forced;
  std::string boot = read_line("/proc/sys/kernel/random/boot_id");
  if (boot.empty()) {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) == 0) boot = std::string("host:") + host;
  }
  return fmt::format("{} uid {} {} {}", boot, ::getuid(), namespace_of("/proc/self/ns/pid"),
                     namespace_of("/proc/self/ns/net"));
}

ShmTransport::ShmTransport(std::shared_ptr<store::Store> store, TransportOptions options,
                           std::vector<int> local, std::string advertised) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    throw Error(fmt::format("transport: rank {} is outside a world of size {}", options.rank,
                            options.world_size));
  }
  std::sort(local.begin(), local.end());
  local.erase(std::unique(local.begin(), local.end()), local.end());
  if (!std::binary_search(local.begin(), local.end(), options.rank))
    local.insert(std::lower_bound(local.begin(), local.end(), options.rank), options.rank);
  for (int r : local)
    check_peer(options.rank, options.world_size, r, "share memory with");
  impl_ = std::make_unique<Impl>();
  auto& m = *impl_;
  m.options = std::move(options);
  m.store = std::move(store);
  m.local = std::move(local);
  m.ring_bytes = ring_bytes_for(m.local.size());
  m.advertised = std::move(advertised);  // "host:port": no spaces (record() writes "-" for none)
  shm::Stores stores = shm::Stores::Auto;
  if (m.options.ring_stores == "cached") {
    stores = shm::Stores::Cached;
  } else if (m.options.ring_stores == "streaming") {
    stores = shm::Stores::Streaming;
  } else if (m.options.ring_stores != "auto") {
    throw Error(fmt::format(
        "shared memory: ring stores '{}': choose auto, cached or streaming", m.options.ring_stores));
  }
  m.stream_receives = stores != shm::Stores::Cached && shm::streaming_stores_available();
  m.peers.resize(static_cast<std::size_t>(m.options.world_size));
  for (int r = 0; r < m.options.world_size; ++r) {
    auto& p = m.peer(r);
    p.copier = shm::RingCopier(stores);
    p.rank = r;
    p.local = std::binary_search(m.local.begin(), m.local.end(), r);
    p.slot = m.slot_of(r);
  }
  m.crowded = static_cast<int>(m.local.size()) > host_cpus();
  // The background thread stays out until the callers have been quiet for
  // kQuiet from now (not from the epoch): a job's first calls come at once.
  m.last_done.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  m.make_mailbox();
  for (int r : m.local) {
    if (r == m.options.rank) continue;
    auto& p = m.peer(r);  // its ring in this rank's mailbox: readable at once
    p.in = &m.mine.cursors(p.slot);
    p.in_ring = m.mine.ring(p.slot);
  }
  m.peer(m.options.rank).state = PeerState::Ready;  // itself: no ring
  m.store->set(m.key(m.options.rank), m.record());
  m.background = std::thread([&m] { m.background_loop(); });
  collie::log().debug("rank {}: shared-memory mailbox for {} ranks of this host ({} each way)",
                      m.options.rank, m.local.size(), plural_bytes(m.ring_bytes));
}

ShmTransport::~ShmTransport() {
  auto& m = *impl_;
  m.stopping = true;
  m.idle_word.fetch_add(1);
  futex_wake(m.idle_word);
  {
    auto& h = m.mine.header();
    h.bell.fetch_add(1);
    futex_wake(h.bell);
  }
  m.background.join();
  std::lock_guard drive(m.drive_mu);
  std::lock_guard lock(m.mu);
  // What was sent whole stays readable: peers read it before they fail.
  m.mine.header().closed.store(1, std::memory_order_release);
  for (int rank : m.attached) {
    auto& p = m.peer(rank);
    if (p.state == PeerState::Ready) ring_bell(p.theirs->header());
  }
  for (auto& p : m.peers)
    m.fail_peer(p, ErrorKind::Connection, "the transport was shut down on this rank");
  for (auto& p : m.peers)
    if (p.pidfd >= 0) ::close(p.pidfd);
  if (m.memfd >= 0) ::close(m.memfd);
}

int ShmTransport::rank() const {
  return impl_->options.rank;
}

int ShmTransport::world_size() const {
  return impl_->options.world_size;
}

RequestPtr ShmTransport::isend(int peer, Tag tag, const void* data, std::size_t bytes,
                               std::uint64_t fingerprint) {
  auto& m = *impl_;
  check_peer(m.options.rank, m.options.world_size, peer, "send to");
  auto r = std::make_shared<ShmRequest>(
      peer, true, tag, const_cast<std::byte*>(static_cast<const std::byte*>(data)), bytes,
      fingerprint);
  const auto lock = m.lock_reached(peer, "send to");
  if (peer == m.options.rank) {
    m.send_to_self(*r);
    return r;
  }
  auto& p = m.peer(peer);
  if (p.state != PeerState::Ready) {
    m.fail_for_peer(*r, p.failure_kind, p.failure);
    return r;
  }
  p.sends.push_back(r);
  if (p.sends.size() == 1) m.push(p);  // at once, on the caller's thread
  return r;
}

RequestPtr ShmTransport::post(int peer, Tag tag, std::byte* data, std::size_t bytes,
                              Consumer consume) {
  auto& m = *impl_;
  const char* op = consume ? "irecv_consume from" : "recv from";
  check_peer(m.options.rank, m.options.world_size, peer, op);
  auto r = std::make_shared<ShmRequest>(peer, false, tag, data, bytes, 0);
  r->consume = std::move(consume);
  const auto lock = m.lock_reached(peer, op);
  auto& p = m.peer(peer);
  m.post_recv(p, r);
  if (r->pending() && p.state == PeerState::Failed) m.fail_for_peer(*r, p.failure_kind, p.failure);
  return r;
}

RequestPtr ShmTransport::irecv(int peer, Tag tag, void* data, std::size_t bytes) {
  return post(peer, tag, static_cast<std::byte*>(data), bytes, {});
}

RequestPtr ShmTransport::irecv_consume(int peer, Tag tag, std::size_t bytes, Consumer consume) {
  if (!consume) {
    throw ArgumentError(
        fmt::format("rank {}: irecv_consume from rank {} (tag {}, {} bytes): the consumer is empty",
                    rank(), peer, tag, bytes));
  }
  return post(peer, tag, nullptr, bytes, std::move(consume));
}

void ShmTransport::wait(const RequestPtr& request, std::optional<std::chrono::milliseconds> timeout) {
  auto& m = *impl_;
  auto& r = m.of(request);
  const auto limit = timeout.value_or(m.options.timeout);
  bool interrupted = false;
  if (r.pending()) {
    m.drive([&r] { return !r.pending(); }, limit);
    if (r.pending()) {
      const int signal = waits_interrupted();
      std::lock_guard lock(m.mu);
      if (r.pending()) {
        m.time_out(request, limit, signal);
        interrupted = signal != 0;
      }
    }
  }
  if (r.state.load(std::memory_order_acquire) == static_cast<int>(State::Failed))
    throw_failure(r.error_kind, r.error, interrupted);
}

bool ShmTransport::wait_some(const RequestPtr& request, std::chrono::milliseconds timeout) {
  auto& r = impl_->of(request);
  if (!impl_->drive([&r] { return !r.pending(); }, timeout)) return false;
  wait(request, 0ms);
  return true;
}

int ShmTransport::wait_any(std::span<const RequestPtr> requests, std::chrono::milliseconds timeout) {
  auto& m = *impl_;
  int found = -1;
  auto finished = [&] {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (!m.of(requests[i]).pending()) {
        found = static_cast<int>(i);
        return true;
      }
    }
    return false;
  };
  m.drive(finished, timeout);
  return found;
}

bool ShmTransport::test(const RequestPtr& request) const {
  return !impl_->of(request).pending();
}

std::uint64_t ShmTransport::fingerprint(const RequestPtr& request) const {
  if (test(request)) return impl_->of(request).fingerprint;
  std::lock_guard lock(impl_->mu);
  return impl_->of(request).fingerprint;
}

std::size_t ShmTransport::transferred(const RequestPtr& request) const {
  std::lock_guard lock(impl_->mu);
  return impl_->of(request).moved;
}

std::vector<std::pair<int, std::uint64_t>> ShmTransport::queued_fingerprints(Tag tag) const {
  std::vector<std::pair<int, std::uint64_t>> out;
  if (impl_->queued_count.load() == 0) return out;
  std::lock_guard lock(impl_->mu);
  for (const auto& p : impl_->peers)
    if (const auto* q = p.unexpected.find(tag))
      for (const auto& u : *q)
        out.emplace_back(p.rank, u->fingerprint);
  return out;
}

std::vector<std::pair<Tag, std::uint64_t>> ShmTransport::queued_from(int peer) const {
  std::vector<std::pair<Tag, std::uint64_t>> out;
  if (peer < 0 || peer >= impl_->options.world_size) return out;
  std::lock_guard lock(impl_->mu);
  impl_->peer(peer).unexpected.for_each(
      [&](Tag tag, const QueuedPtr& u) { out.emplace_back(tag, u->fingerprint); });
  return out;
}

bool ShmTransport::any_queued() const {
  return impl_->queued_count.load(std::memory_order_relaxed) > 0;
}

std::shared_ptr<void> ShmTransport::claim_progress() {
  auto* w = &impl_->waiters;
  ++*w;
  return std::shared_ptr<void>(w, [](std::atomic<int>* x) { --*x; });
}

bool ShmTransport::shares_memory_with(int peer) const {
  return peer >= 0 && peer < impl_->options.world_size && impl_->peer(peer).local;
}

std::string ShmTransport::describe_peer(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return fmt::format("rank {}", peer);
  std::lock_guard lock(impl_->mu);
  return impl_->describe_peer(peer);
}

std::string ShmTransport::failure_of(int peer) const {
  if (peer < 0 || peer >= impl_->options.world_size) return {};
  std::lock_guard lock(impl_->mu);
  const auto& p = impl_->peer(peer);
  return p.local && p.state == PeerState::Failed ? p.failure : std::string();
}

std::string ShmTransport::describe() const {
  return "shm";
}

void ShmTransport::prefetch() {
  auto& m = *impl_;
  std::vector<std::string> keys;
  for (int r : m.local)
    keys.push_back(m.key(r));
  const auto values = m.store->multi_get(keys);
  std::lock_guard lock(m.mu);
  for (std::size_t i = 0; i < values.size(); ++i)
    m.learn(m.peer(m.local[i]), values[i]);
}

}  // namespace collie::transport
