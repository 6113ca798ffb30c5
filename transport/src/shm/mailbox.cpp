// Mailboxes: making this rank's, publishing it in the store, and attaching
// to a peer's through /proc, checking that it is the peer's and this
// group's (state.hpp).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/crypto.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/transport/keys.hpp>

#include "state.hpp"

namespace collie::transport {

using namespace std::chrono_literals;
using namespace shm;

namespace {

// Faults in a ring's pages now, writable, in this process's mapping:
// otherwise a message of 8 B would meet a fresh page every 32 messages for
// the first 4,000 (a fault and a zeroed page each, 1-2 us).
void populate(std::byte* ring, std::size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  if (::madvise(ring, bytes, MADV_POPULATE_WRITE) == 0) return;
#endif
  for (std::size_t at = 0; at < bytes; at += kPage)  // older kernels: touch each page
    reinterpret_cast<volatile std::uint8_t*>(ring)[at] = 0;
}

}  // namespace

std::size_t ShmTransport::Impl::slot_of(int rank) const {
  return static_cast<std::size_t>(std::lower_bound(local.begin(), local.end(), rank) -
                                  local.begin());
}

std::string ShmTransport::Impl::describe_peer(int rank) const {
  if (rank == options.rank) return fmt::format("rank {} (itself)", rank);
  const auto& p = peer(rank);
  if (!p.address.empty()) return fmt::format("rank {} at {} (shared memory)", rank, p.address);
  return fmt::format("rank {} (shared memory)", rank);
}

void ShmTransport::Impl::make_mailbox() {
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

std::string ShmTransport::Impl::record() const {
  return fmt::format("{} {} {:016x}{:016x} {}", ::getpid(), memfd, secret[0], secret[1],
                     advertised.empty() ? "-" : advertised);
}

void ShmTransport::Impl::learn(Peer& p, std::string value) {
  p.published = std::move(value);
  const auto space = p.published.rfind(' ');
  if (space != std::string::npos && p.published.substr(space + 1) != "-")
    p.address = p.published.substr(space + 1);
}

std::string ShmTransport::Impl::find_record(int rank, Clock::time_point deadline,
                                            std::string& error) {
  {
    std::lock_guard lock(mu);
    if (!peer(rank).published.empty()) return peer(rank).published;
  }
  const auto key = keys::shm_mailbox(options.group, rank);
  try {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    auto value = store->get(key, std::max(left, 1ms));
    std::lock_guard lock(mu);
    learn(peer(rank), value);
    return value;
  } catch (const TimeoutError&) {
    error = fmt::format(
        "rank {} never published its shared-memory mailbox (store key '{}') within {}: did it "
        "start and join the group?",
        rank, key, describe_duration(options.timeout));
  } catch (const Error& e) {
    error = fmt::format("could not look up rank {}'s mailbox in the store: {}", rank, e.what());
  }
  return "";
}

namespace {

// The kernel has begun to end process `pid` (PF_EXITING in the flags of
// /proc/<pid>/stat, the 9th field): its files are closed, but a large
// process (a sanitizer's shadow memory, many threads) may take a while
// longer before its pidfd says it exited.
bool is_exiting(pid_t pid) {
  constexpr unsigned long kPfExiting = 0x4;
  std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "re");
  if (f == nullptr) return true;  // gone already
  char line[1024] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const char* paren = read ? std::strrchr(line, ')') : nullptr;
  unsigned long flags = 0;
  // After ") ": state, ppid, pgrp, session, tty_nr, tpgid, flags.
  if (paren == nullptr ||
      std::sscanf(paren + 1, " %*c %*d %*d %*d %*d %*d %lu", &flags) != 1)
    return false;
  return (flags & kPfExiting) != 0;
}

}  // namespace

std::string ShmTransport::Impl::attach(Peer& p, const std::string& value) {
  unsigned long long pid = 0, fd = 0;
  char hex[33] = {};
  if (std::sscanf(value.c_str(), "%llu %llu %32s ", &pid, &fd, hex) != 3 || std::strlen(hex) != 32)
    return fmt::format("its store record '{}' is not \"<pid> <fd> <secret>\"", value);
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
    // A process that is ending has closed its files before its pidfd says
    // it exited: give it a moment to tell the two apart.
    pollfd exited{p.pidfd, POLLIN, 0};
    if (::poll(&exited, 1, 200) > 0 || is_exiting(p.pid))
      return "its process ended (it exited or was killed)";
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
  if (base == MAP_FAILED) return fmt::format("cannot map its mailbox: {}", std::strerror(errno));
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
  p.out_tail_seen = p.out->tail.load(std::memory_order_acquire);
  // Both views of the two rings of the pair (the peer's mapping of its own
  // it faults in when it attaches to this rank).
  populate(p.out_ring, ring_bytes);
  populate(p.in_ring, ring_bytes);
  // Can this rank read the peer's memory? The kernel's ptrace rules decide
  // (same user; Yama's ptrace_scope; containers): read its magic. (Only
  // asked when single copies are on: the ring is faster here.)
  std::uint64_t magic = 0;
  ssize_t got = -1;
  errno = 0;
  if (options.settings.shm_single_copy_from > 0) {
    iovec here{&magic, sizeof magic};
    iovec there{reinterpret_cast<void*>(h.address), sizeof magic};
    got = ::process_vm_readv(p.pid, &here, 1, &there, 1, 0);
  }
  const bool single = got == static_cast<ssize_t>(sizeof magic) && magic == kMagic;
  p.in->single_copy.store(single ? 1 : 2, std::memory_order_release);
  if (options.settings.shm_single_copy_from == 0) {
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
  p.posted.prime();
  p.unexpected.prime();
  attached.push_back(p.rank);
  return "";
}

void ShmTransport::Impl::depart(Peer& p, const std::string& why) {
  p.state = PeerState::Departed;
  p.failure_kind = ErrorKind::Connection;
  p.failure = fmt::format("no shared memory with {}: {}", describe_peer(p.rank), why);
  attached.push_back(p.rank);
}

void ShmTransport::Impl::ensure_attached(int rank) {
  std::string error;
  const auto value = find_record(rank, Clock::now() + options.timeout, error);
  std::lock_guard lock(mu);
  auto& p = peer(rank);
  if (p.state != PeerState::Unattached) return;
  if (error.empty()) error = attach(p, value);
  if (!error.empty()) {
    depart(p, error);
    return;
  }
  collie::log().debug("rank {}: attached to {}", options.rank, describe_peer(rank));
}

std::unique_lock<std::mutex> ShmTransport::Impl::lock_reached(int rank, std::string_view op) {
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

}  // namespace collie::transport
