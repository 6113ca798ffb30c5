// Single copies: a message of TransportOptions::single_copy_from bytes or
// more goes through the ring as its header alone, and the receiver reads
// the payload straight from the sender's memory (process_vm_readv, where
// the kernel allows it: attach() asks), then acknowledges it so that the
// sender's request finishes (state.hpp). Under the backend's lock.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <span>
#include <sys/uio.h>

#include <fmt/format.h>

#include "state.hpp"

namespace collie::transport {

using namespace shm;

namespace {

// What one process_vm_readv reads at most (the lock is held meanwhile).
constexpr std::size_t kRemoteChunk = 1 << 20;

}  // namespace

void ShmTransport::Impl::read_remote(Peer& p) {
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

bool ShmTransport::Impl::read_from(Peer& p, std::uint64_t address, std::byte* into, std::size_t n) {
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

bool ShmTransport::Impl::collect_acks(Peer& p) {
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

}  // namespace collie::transport
