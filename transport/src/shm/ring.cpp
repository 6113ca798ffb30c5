// The rings' data path (state.hpp): a sender writes each message into its
// ring in the receiver's mailbox, a piece at a time; the receiver reads it
// out to the receive that matches it (by tag, in order), or into the
// unexpected queue (bounded: a message that does not fit waits in the
// ring), or drops it when its sender withdrew it half-way. And how requests
// finish. All under the backend's lock.
#include <algorithm>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "bell.hpp"
#include "state.hpp"

namespace collie::transport {

using namespace shm;

namespace {

// A plain receive of a message this large (more than a core's L2 cache
// holds) is stored into its destination with non-temporal stores: it leaves
// the caches anyway, and storing around them saves reading every line of the
// destination first (docs/PERFORMANCE.md, "Shared memory").
constexpr std::size_t kStreamReceivesFrom = std::size_t{8} << 20;

}  // namespace

void ShmTransport::Impl::complete(ShmRequest& r) {
  r.state.store(static_cast<int>(State::Done), std::memory_order_release);
  note_activity();
  done_cv.notify_all();
}

void ShmTransport::Impl::fail(ShmRequest& r, ErrorKind kind, std::string message) {
  if (!r.pending()) return;
  r.error_kind = kind;
  r.error = std::move(message);
  r.state.store(static_cast<int>(State::Failed), std::memory_order_release);
  done_cv.notify_all();
}

void ShmTransport::Impl::fail_for_peer(ShmRequest& r, ErrorKind kind, const std::string& reason) {
  fail(r, kind, fmt::format("{} failed: {} ({})", describe_request(r), reason, progress_text(r)));
}

void ShmTransport::Impl::fail_size_mismatch(ShmRequest& r, std::size_t sent, std::uint64_t print) {
  r.fingerprint = print;
  fail(r, ErrorKind::Request,
       size_mismatch_text(describe_request(r), describe_peer(r.peer()), sent, r.bytes));
}

void ShmTransport::Impl::fail_peer(Peer& p, ErrorKind kind, const std::string& reason) {
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

bool ShmTransport::Impl::push(Peer& p) {
  bool wrote = false;
  while (!p.sends.empty()) {
    auto& r = *p.sends.front();
    const std::size_t total = ring_bytes_of(r.bytes);
    if (ring_bytes - (p.out_head - p.out_tail_seen) < total - p.send_done)
      p.out_tail_seen = p.out->tail.load(std::memory_order_acquire);
    const std::uint64_t used = p.out_head - p.out_tail_seen;
    if (used > ring_bytes) {
      fail_peer(p, ErrorKind::Protocol,
                fmt::format("{} broke the shared-memory protocol (its ring's read cursor is "
                            "ahead of the write cursor)",
                            describe_peer(p.rank)));
      return wrote;
    }
    std::size_t room = ring_bytes - used;
    if (room == 0) break;
    if (p.send_done == 0 && options.settings.shm_single_copy_from > 0 && r.bytes >= options.settings.shm_single_copy_from &&
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
      p.send_header = {r.tag,         p.send_seq++,
                       r.bytes,       r.fingerprint,
                       r.bytes <= kTinyBytes ? kTiny : kInline, 0};
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
    r.moved = r.bytes <= kTinyBytes
                  ? (p.send_done == total ? r.bytes : 0)
                  : std::min(r.bytes, p.send_done > kHeaderBytes ? p.send_done - kHeaderBytes : 0);
    if (p.send_done < total) break;
    p.send_done = 0;
    auto done = std::move(p.sends.front());
    p.sends.pop_front();
    complete(*done);
  }
  if (wrote) {
    if (use_ready) mark_ready(p);
    ring_bell(p.theirs->header());
  }
  return wrote;
}

void ShmTransport::Impl::mark_ready(Peer& p) {
  auto& word = p.theirs->header().ready[my_slot / 64];
  // Always the read-modify-write, even where the bit is seen set: a load
  // that found it set could pass the cursor's store (a store-load pair
  // x86 reorders) while the receiver clears the word, and the message
  // would then wait for the next one. The release orders the cursor
  // before the bit.
  word.fetch_or(std::uint64_t{1} << (my_slot % 64), std::memory_order_release);
}

void ShmTransport::Impl::list_sending(Peer& p) {
  if (!use_ready || p.listed_sending || (p.sends.empty() && p.in_flight.empty())) return;
  p.listed_sending = true;
  sending.push_back(p.rank);
}

inline void ShmTransport::Impl::write_ring(Peer& p, const ShmRequest& r, std::size_t from,
                                          std::size_t n) {
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
        if (r.bytes <= kTinyBytes && r.bytes > 0 && r.data != nullptr)
          std::memcpy(h.data() + kTinyAt, r.data, r.bytes);
        std::memcpy(dst + done, h.data() + pos, k);
      } else if (r.bytes > kTinyBytes && pos < kHeaderBytes + r.bytes) {
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

bool ShmTransport::Impl::pull(Peer& p) {
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

inline bool ShmTransport::Impl::start_message(Peer& p) {
  std::array<std::uint64_t, 6> h{};
  const std::size_t at = static_cast<std::size_t>(p.in_tail % ring_bytes);
  std::memcpy(h.data(), p.in_ring + at, sizeof h);  // never wraps: at is a multiple of 64
  const Tag tag = h[0];
  const std::uint64_t seq = h[1];
  const std::uint64_t length = h[2];
  const std::uint64_t print = h[3];
  const std::uint64_t kind = h[4];
  if ((kind != kInline && kind != kRemote && kind != kTiny) ||
      (kind == kTiny && length > kTinyBytes)) {
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
  if (p.in->withdrawn_of(seq).load(std::memory_order_acquire) == seq + 1) {
    // Withdrawn half-way by the sender: dropped as it comes.
    if (r) {
      r->fingerprint = print;
      withdrawn(*r);
    }
  } else if (!r) {
    if (held + length > options.max_unexpected_bytes && length > 0) {
      p.paused = true;
      return false;
    }
    p.paused = false;
    auto q = make_pooled<Queued>();
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
  if (kind == kTiny) {
    // The payload is in the line read: taken now (the ring's room is
    // given back after it, by the caller's tail store).
    if (length > 0) deliver(p, p.in_ring + at + kTinyAt, length);
    p.read_done = length;
    finish_message(p);
  } else if (length == 0) {
    finish_message(p);
  }
  return true;
}

void ShmTransport::Impl::deliver(Peer& p, const std::byte* piece, std::size_t n) {
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

void ShmTransport::Impl::withdrawn(ShmRequest& r) {
  fail(r, ErrorKind::Withdrawn,
       fmt::format("{} failed: {} withdrew its message half-way (its send timed out or its "
                   "collective was abandoned); what came of it was dropped",
                   describe_request(r), describe_peer(r.peer())));
}

bool ShmTransport::Impl::drop_if_withdrawn(Peer& p) {
  if (p.length == 0 ||
      p.in->withdrawn_of(p.reading_seq).load(std::memory_order_acquire) != p.reading_seq + 1)
    return false;
  if (p.target) withdrawn(*p.target);
  p.target.reset();
  unqueue_partial(p);
  return true;
}

void ShmTransport::Impl::unqueue_partial(Peer& p) {
  if (!p.queued) return;
  p.unexpected.erase(p.reading_tag, p.queued);
  held -= p.queued->data.size();
  --queued_count;
  p.queued.reset();
}

bool ShmTransport::Impl::finish_message(Peer& p) {
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

void ShmTransport::Impl::post_recv(Peer& p, const ShmRequestPtr& r) {
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

void ShmTransport::Impl::send_to_self(ShmRequest& r) {
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
    auto q = make_pooled<Queued>();
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

}  // namespace collie::transport
