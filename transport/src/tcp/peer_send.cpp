// One peer's send queue: posting, sending to oneself, and writing headers
// and payloads in as few system calls as the kernel allows (peer_stream.hpp).
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <sys/socket.h>

#include "connections.hpp"
#include "peer_stream.hpp"

namespace collie::transport::tcp {

namespace {
constexpr std::size_t kPostFlushBytes = 64 * 1024;  // written by post_send() at once
}  // namespace

bool PeerStream::wants_to_write() const {
  if (sealed && sealed->out_begin < sealed->out_end) return true;
  // A striped message whose header is out: the rest is its lanes'.
  for (const auto& r : sends)
    if (r->header_sent < wire::kHeaderBytes || (!r->striped && r->moved < r->bytes)) return true;
  return false;
}

// ---- sending ----

void PeerStream::post_send(TcpRequestPtr r) {
  sends.push_back(std::move(r));
  // Only the first kPostFlushBytes now, in the caller's thread: the rest is
  // written by the poller, between reads. A collective posts its receives
  // and sends together, and bytes its peers send it are read sooner (large
  // all_reduce on a crowded host: a fifth faster; docs/transport.md).
  if (sends.size() == 1) flush(kPostFlushBytes);
}

void PeerStream::send_to_self(TcpRequest& r) {
  if (auto recv = posted.take_first(r.tag)) {
    if (recv->bytes != r.bytes) {
      table.fail_size_mismatch(*recv, r.bytes, r.fingerprint);
    } else {
      recv->fingerprint = r.fingerprint;
      if (r.bytes == 0 || deliver(*recv, 0, {r.data, r.bytes})) {
        recv->moved = r.bytes;
        table.complete(*recv);
      }
    }
  } else {
    // Buffered: a send to oneself completes at once, whatever the queue holds.
    auto u = table.pool.hold(r.bytes, r.fingerprint);
    if (r.bytes > 0) std::memcpy(u->data.get(), r.data, r.bytes);
    u->got = r.bytes;
    u->complete = true;
    unexpected.push(r.tag, std::move(u));
  }
  r.moved = r.bytes;
  table.complete(r);
}

std::size_t PeerStream::gather(Pieces& pieces, std::size_t room, std::size_t& count) {
  count = 0;
  std::size_t asked = 0;
  for (auto& r : sends) {
    if (count + 2 > kMaxPieces || room == 0) break;
    if (!r->header_built) {
      // Large enough, with the lanes open: its payload goes over them, kept
      // until confirmed where they leave from more than one interface.
      r->striped = r->bytes >= kStripeFrom && lanes == LanesState::Open &&
                   table.streams.load(std::memory_order_relaxed) > 1;
      std::uint64_t length = r->bytes;
      if (r->striped) {
        ++undispensed_;
        length |= wire::kStriped;
        r->confirm = lanes_spread();
        if (r->confirm) {
          length |= wire::kConfirm;
          r->chunk_lanes.assign(chunks_of(r->bytes), 0);
        }
      }
      if (r->whole) length = wire::kWhole;
      wire::encode(
          wire::Header{r->tag, send_sequence++, length, r->whole ? r->whole_of : r->fingerprint},
          r->header.data());
      r->header_built = true;
    }
    if (r->header_sent < wire::kHeaderBytes) {
      pieces[count++] = {r->header.data() + r->header_sent, wire::kHeaderBytes - r->header_sent};
      asked += wire::kHeaderBytes - r->header_sent;
    }
    // A striped message's payload is the lanes': the next header follows.
    if (r->striped) continue;
    if (r->moved < r->bytes) {
      const std::size_t take = std::min(r->bytes - r->moved, room);
      pieces[count++] = {r->data + r->moved, take};
      asked += take;
      room -= take;
      if (take < r->bytes - r->moved) break;
    }
  }
  return asked;
}

void PeerStream::advance(std::size_t written) {
  // As gather() laid the bytes out: headers, and payloads but striped ones.
  std::size_t left = written;
  std::array<TcpRequest*, kMaxPieces> whole{};
  std::size_t wholes = 0;
  for (auto& p : sends) {
    auto& r = *p;
    const std::size_t h = std::min(left, wire::kHeaderBytes - r.header_sent);
    r.header_sent += h;
    left -= h;
    if (!r.striped) {
      const std::size_t d = std::min(left, r.bytes - r.moved);
      r.moved += d;
      left -= d;
    }
    if (r.header_sent == wire::kHeaderBytes && r.moved == r.bytes && !r.confirm) {
      if (wholes < whole.size()) whole[wholes++] = &r;
    } else if (!r.striped || r.header_sent < wire::kHeaderBytes) {
      break;  // the kernel took this one in part
    }
    if (left == 0) break;
  }
  for (std::size_t i = 0; i < wholes; ++i)
    complete_send(*whole[i]);
}

void PeerStream::complete_send(TcpRequest& r) {
  for (auto it = sends.begin(); it != sends.end(); ++it) {
    if (it->get() != &r) continue;
    auto done = std::move(*it);
    sends.erase(it);
    table.complete(*done);
    return;
  }
}

void PeerStream::flush(std::size_t budget) {
  if (sealed) return flush_sealed(budget);
  while (!sends.empty() && state == PeerState::Ready && budget > 0) {
    Pieces pieces;
    std::size_t n = 0;
    const std::size_t asked = gather(pieces, budget, n);
    if (asked == 0) return;  // a striped message's lanes carry the rest
    msghdr message{};
    message.msg_iov = pieces.data();
    message.msg_iovlen = n;
    const ssize_t w = ::sendmsg(fd(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (retry_after(errno)) continue;
      return;
    }
    const auto written = static_cast<std::size_t>(w);
    budget -= std::min(budget, written);
    advance(written);
    if (written < asked) return;  // the kernel's buffer is full
  }
}

}  // namespace collie::transport::tcp
