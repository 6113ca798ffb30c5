// A pair's lanes: chunks of striped messages out and in (lanes.hpp).
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <span>
#include <sys/socket.h>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "connections.hpp"
#include "flow_stats.hpp"
#include "peer_stream.hpp"

namespace collie::transport::tcp {

std::string PeerStream::lane_name(const Lane& lane, bool sending) const {
  return fmt::format("lane {} of the connections {} {}", lane.number, sending ? "to" : "from",
                     table.describe_peer(rank));
}

bool PeerStream::lane_retry_after(const Lane& lane, int error) {
  if (error == EINTR) return true;
  // As the pair's connection says it (a host gone: "cannot be reached"),
  // and which lane, unless the others carry on without it.
  if (error != EAGAIN && error != EWOULDBLOCK && !lose_lane(lane, error_reason(error)))
    fail(ErrorKind::Connection, error_reason(error) + on_lane(lane));
  return false;
}

void PeerStream::lane_closed(const Lane& lane) {
  if (!lose_lane(lane, closed_reason()))
    fail(ErrorKind::Connection, closed_reason() + on_lane(lane));
}

void PeerStream::add_out_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal,
                              std::string from) {
  // poll() says a lane may write while its kernel holds less than this
  // unsent: chunks go to the lanes whose flows drain (lanes.hpp).
  out_lanes.push_back(std::make_unique<Lane>(number, std::move(c), std::move(seal)));
  out_lanes.back()->from = std::move(from);
  set_low_water(*out_lanes.back());
}

void PeerStream::set_low_water(Lane& lane) {
  const int low = kLowWater;
  ::setsockopt(lane.fd(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &low, sizeof low);
}

void PeerStream::add_in_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal) {
  in_lanes.push_back(std::make_unique<Lane>(number, std::move(c), std::move(seal)));
}

std::string PeerStream::lanes_report() const {
  std::string each;
  std::vector<const Lane*> all;
  for (const auto* lanes_of : {&out_lanes, &retired_out})
    for (const auto& lane : *lanes_of)
      all.push_back(lane.get());
  for (const Lane* lane : all) {
    const auto f = flow_stats(lane->fd());
    each +=
        fmt::format("{}lane {}{}{}: {} chunks, {:.1f} MiB", each.empty() ? "" : "; ", lane->number,
                    lane->from.empty() ? "" : " from " + lane->from, lane->lost ? " (lost)" : "",
                    lane->chunks, static_cast<double>(lane->bytes) / 1048576);
    if (f.known && f.busy_us > 0)
      each += fmt::format(" at {:.0f} Mbit/s over {:.2f} s busy",
                          static_cast<double>(f.bytes_acked) * 8 / static_cast<double>(f.busy_us),
                          static_cast<double>(f.busy_us) / 1e6);
  }
  return each;
}

std::vector<TcpTransport::LaneUse> PeerStream::lane_uses() const {
  std::vector<TcpTransport::LaneUse> out;
  for (const auto* among : {&out_lanes, &retired_out})
    for (const auto& lane : *among)
      out.push_back({lane->number, true, lane->chunks, lane->bytes, lane->from, lane->lost});
  for (const auto* among : {&in_lanes, &retired_in})
    for (const auto& lane : *among)
      out.push_back({lane->number, false, lane->chunks, lane->bytes, {}, lane->lost});
  return out;
}

void PeerStream::fail_lanes() {
  for (auto* lanes_of : {&out_lanes, &in_lanes}) {
    for (auto& lane : *lanes_of) {
      lane->request = nullptr;
      if (lane->connection.valid()) ::shutdown(lane->fd(), SHUT_RDWR);  // closed by the transport
    }
  }
}

// ---- sending ----

bool PeerStream::lane_wants_to_write(const Lane& lane) const {
  if (lane.lost) return false;
  if (lane.request != nullptr) return true;
  if (lane.sealed && lane.sealed->out_begin < lane.sealed->out_end) return true;
  return undispensed_ > 0 || redo_for(lane);
}

bool PeerStream::take_chunk(Lane& lane) {
  if (redo_for(lane) && take_redo(lane)) return true;
  if (undispensed_ == 0) return false;
  // The first striped message with chunks left (its header is built: it
  // has its sequence number).
  TcpRequest* found = nullptr;
  for (auto& p : sends) {
    if (p->striped && p->dispensed < p->bytes) {
      found = p.get();
      break;
    }
  }
  if (found == nullptr) return false;
  auto& r = *found;
  const std::size_t n = std::min(kChunkBytes, r.bytes - r.dispensed);
  if (lane_rests(lane, n)) return false;
  give_chunk(lane, r, r.dispensed, n);
  r.dispensed += n;
  if (r.dispensed == r.bytes) --undispensed_;
  return true;
}

void PeerStream::give_chunk(Lane& lane, TcpRequest& r, std::size_t offset, std::size_t n) {
  const auto sequence = wire::get64(r.header.data() + 8);
  wire::encode(wire::Frame{sequence, offset, static_cast<std::uint32_t>(n)}, lane.frame.data());
  lane.request = &r;
  lane.frame_sent = 0;
  lane.data = r.data + offset;
  lane.length = n;
  lane.sent = 0;
  lane.last_sequence = std::max(lane.last_sequence, sequence);
  if (r.confirm) r.chunk_lanes[offset / kChunkBytes] = static_cast<std::uint8_t>(lane.number);
}

double PeerStream::lane_rate(Lane& lane, std::chrono::steady_clock::time_point now) {
  // The kernel's sample moves with each acknowledgement; read it at most
  // once a millisecond.
  if (now - lane.rate_read >= std::chrono::milliseconds(1)) {
    const auto f = flow_stats(lane.fd());
    lane.rate = f.known ? static_cast<double>(f.rate) : 0.0;
    lane.rate_read = now;
  }
  return lane.rate;
}

std::chrono::nanoseconds lane_rest(LaneLoad mine, std::span<const LaneLoad> others,
                                   std::size_t n) {
  // Less than this much sooner elsewhere, the lane takes the chunk: rates
  // are samples, and a chunk kept back costs a wake-up.
  constexpr double kMargin = 1.25;
  constexpr std::chrono::nanoseconds kLongestRest = std::chrono::milliseconds(2);
  // An idle lane always takes it (that is how a lane's rate is learnt), and
  // so does one whose rate is not known yet.
  if (mine.queued == 0 || mine.rate <= 0) return {};
  const double my_time = static_cast<double>(mine.queued + n) / mine.rate;
  double best = my_time;
  for (const auto& other : others)
    if (other.rate > 0) best = std::min(best, static_cast<double>(other.queued + n) / other.rate);
  if (my_time <= best * kMargin) return {};
  // Until about half the difference has drained.
  const auto rest = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>((my_time - best) / 2));
  return std::clamp(rest, std::chrono::nanoseconds(1), kLongestRest);
}

bool PeerStream::lane_rests(Lane& lane, std::size_t n) {
  const int streams = table.streams.load(std::memory_order_relaxed);
  if (out_lanes.size() < 2 || streams < 2) return false;
  const auto mine = outstanding(lane.fd());
  if (mine == 0) return false;  // (lane_rest()'s first rule, without a system call more)
  const auto now = std::chrono::steady_clock::now();
  std::array<LaneLoad, wire::kMaxLanes> others{};
  std::size_t count = 0;
  for (auto& other : out_lanes) {
    if (other.get() == &lane || other->number > streams || !other->connection.valid() ||
        other->lost || count == others.size())
      continue;
    others[count++] = {outstanding(other->fd()), lane_rate(*other, now)};
  }
  const auto rest =
      lane_rest({mine, lane_rate(lane, now)}, std::span(others.data(), count), n);
  if (rest.count() == 0) return false;
  lane.rest_until = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(rest);
  return true;
}

void PeerStream::chunk_sent(Lane& lane) {
  auto& r = *std::exchange(lane.request, nullptr);
  ++lane.chunks;
  lane.bytes += lane.length;
  r.moved = std::min(r.bytes, r.moved + lane.length);  // a chunk sent again counts once
  if (r.confirm)
    complete_if_confirmed(r);
  else if (r.moved == r.bytes && r.header_sent == wire::kHeaderBytes)
    complete_send(r);
}

void PeerStream::flush_lane(Lane& lane) {
  if (state != PeerState::Ready || lane.lost) return;
  if (lane.sealed) return flush_lane_sealed(lane);
  bool taken = false;
  for (;;) {
    if (lane.request == nullptr) {
      // One new chunk a call: poll() said the lane drained (lanes.hpp).
      if (taken || !take_chunk(lane)) return;
      taken = true;
    }
    iovec pieces[2];
    int n = 0;
    if (lane.frame_sent < wire::kFrameBytes)
      pieces[n++] = {lane.frame.data() + lane.frame_sent, wire::kFrameBytes - lane.frame_sent};
    pieces[n++] = {const_cast<std::byte*>(lane.data) + lane.sent, lane.length - lane.sent};
    msghdr message{};
    message.msg_iov = pieces;
    message.msg_iovlen = static_cast<std::size_t>(n);
    const ssize_t w = ::sendmsg(lane.fd(), &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (lane_retry_after(lane, errno)) continue;
      return;
    }
    auto written = static_cast<std::size_t>(w);
    const std::size_t f = std::min(written, wire::kFrameBytes - lane.frame_sent);
    lane.frame_sent += f;
    lane.sent += written - f;
    if (lane.sent < lane.length || lane.frame_sent < wire::kFrameBytes) return;  // kernel full
    chunk_sent(lane);
  }
}

void PeerStream::flush_lane_sealed(Lane& lane) {
  auto& s = *lane.sealed;
  bool taken = false;
  while (state == PeerState::Ready) {
    if (s.out_begin < s.out_end) {
      const ssize_t w = ::send(lane.fd(), s.out.data() + s.out_begin, s.out_end - s.out_begin,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (lane_retry_after(lane, errno)) continue;
        return;
      }
      s.out_begin += static_cast<std::size_t>(w);
      if (s.out_begin < s.out_end) return;  // the kernel's buffer is full
      s.out_begin = s.out_end = 0;
      if (lane.request != nullptr) chunk_sent(lane);  // the chunk is the kernel's
      continue;
    }
    if (taken || !take_chunk(lane)) return;
    taken = true;
    // The frame and the chunk as two records: the receiver opens the
    // chunk's straight into its buffer.
    const std::array<std::span<const std::byte>, 1> frame{
        std::span(reinterpret_cast<const std::byte*>(lane.frame.data()), wire::kFrameBytes)};
    s.sealer.seal(frame, s.out.data());
    s.out_end = wire::kFrameBytes + seal::kOverheadBytes;
    const std::array<std::span<const std::byte>, 1> chunk{std::span(lane.data, lane.length)};
    s.sealer.seal(chunk, s.out.data() + s.out_end);
    s.out_end += lane.length + seal::kOverheadBytes;
  }
}

// ---- receiving ----

// Checks a frame against the message it belongs to: the chunk fits in it,
// whole, and is not more than the message has left; of a confirmed
// message, where a chunk may come twice, it is one of its chunks.
static std::string frame_problem(const wire::Frame& f, std::uint64_t message_length,
                                 std::uint64_t got, bool confirm) {
  if (f.length == 0 || f.length > kChunkBytes)
    return fmt::format("a chunk of {} bytes (1 to {} may come)", f.length, kChunkBytes);
  if (f.offset > message_length || f.length > message_length - f.offset)
    return fmt::format("a chunk of {} bytes at offset {} of a message of {}", f.length, f.offset,
                       message_length);
  if (confirm) {
    if (f.offset % kChunkBytes != 0 ||
        f.length != std::min<std::uint64_t>(kChunkBytes, message_length - f.offset))
      return fmt::format("a chunk of {} bytes at offset {}, not one of a message's", f.length,
                         f.offset);
  } else if (f.length > message_length - got) {
    return fmt::format("more chunks than a message of {} bytes holds", message_length);
  }
  return {};
}

bool PeerStream::frame_ready(Lane& lane) {
  const auto& f = lane.current;
  if (rx == Rx::Striped && f.sequence == current.sequence) {
    lane.waiting = false;
    lane.stale = false;
    if (!lane.checked) {
      lane.checked = true;
      if (auto why = frame_problem(f, current.length, current_got, current_confirm); !why.empty()) {
        fail(ErrorKind::Protocol, fmt::format("{} broke the protocol: {} came on {}",
                                              table.describe_peer(rank), why,
                                              lane_name(lane, false)));
        return false;
      }
    }
    return true;
  }
  // A message the connection has not begun (or has begun and paused on).
  if (f.sequence >= recv_sequence || (rx == Rx::Paused && f.sequence == current.sequence)) {
    lane.waiting = true;
    return false;
  }
  // A chunk sent again, of a confirmed message that came whole without it.
  if (peer_confirms && f.length <= kChunkBytes) {
    lane.waiting = false;
    lane.stale = true;
    return true;
  }
  fail(ErrorKind::Protocol,
       fmt::format("{} broke the protocol: a chunk of message number {} came on {} after that "
                   "message was whole (or it was never striped)",
                   table.describe_peer(rank), f.sequence, lane_name(lane, false)));
  return false;
}

void PeerStream::new_frame(Lane& lane) {
  lane.framed = true;
  lane.checked = false;
  lane.current = wire::decode_frame(lane.frame_in.data());
  lane.got = 0;
}

std::byte* PeerStream::chunk_target(Lane& lane) {
  auto* target = lane.stale ? nullptr : current_target();
  if (target != nullptr) return target + lane.current.offset;
  if (lane.staging.size() < kChunkBytes) lane.staging.resize(kChunkBytes);
  return reinterpret_cast<std::byte*>(lane.staging.data());
}

void PeerStream::chunk_bytes(Lane& lane, std::size_t n) {
  lane.got += n;
  if (lane.got < lane.current.length) return;
  const auto offset = static_cast<std::size_t>(lane.current.offset);
  lane.framed = false;
  lane.frame_got = 0;
  ++lane.chunks;
  lane.bytes += lane.got;
  if (std::exchange(lane.stale, false)) return;  // dropped
  if (current_confirm) {                         // a chunk sent again after a lost lane counts once
    auto& in = chunks_in[offset / kChunkBytes];
    if (in != 0) return;
    in = 1;
  }
  if (current_recv && current_recv->consume) {
    const std::span<const std::byte> chunk(reinterpret_cast<const std::byte*>(lane.staging.data()),
                                           lane.got);
    if (!deliver(*current_recv, offset, chunk)) current_recv.reset();  // the rest is dropped
  }
  account(lane.got);
}

void PeerStream::receive_lane(Lane& lane) {
  if (state != PeerState::Ready || lane.lost) return;
  if (lane.sealed)
    receive_lane_sealed(lane);
  else
    receive_lane_clear(lane);
  pump();
}

void PeerStream::receive_lane_clear(Lane& lane) {
  while (state == PeerState::Ready) {
    ssize_t n = 0;
    std::size_t asked = 0;
    if (!lane.framed) {
      asked = wire::kFrameBytes - lane.frame_got;
      n = ::recv(lane.fd(), lane.frame_in.data() + lane.frame_got, asked, MSG_DONTWAIT);
      if (n > 0) {
        lane.frame_got += static_cast<std::size_t>(n);
        if (lane.frame_got == wire::kFrameBytes) new_frame(lane);
      }
    } else {
      if (!frame_ready(lane)) return;
      asked = lane.current.length - lane.got;
      n = ::recv(lane.fd(), chunk_target(lane) + lane.got, asked, MSG_DONTWAIT);
      if (n > 0) chunk_bytes(lane, static_cast<std::size_t>(n));
    }
    if (n == 0) {
      lane_closed(lane);
      return;
    }
    if (n < 0) {
      if (lane_retry_after(lane, errno)) continue;
      return;
    }
    if (static_cast<std::size_t>(n) < asked) return;  // drained
  }
}

bool PeerStream::open_lane_records(Lane& lane) {
  auto& s = *lane.sealed;
  while (state == PeerState::Ready) {
    if (lane.framed && !frame_ready(lane)) return false;
    const std::size_t avail = s.in_end - s.in_begin;
    if (avail < seal::kLengthBytes) return true;
    const std::size_t n = seal::Opener::announced(s.in.data() + s.in_begin);
    const std::size_t most = lane.framed ? lane.current.length - lane.got : wire::kFrameBytes;
    if (n == 0 || n > most || (!lane.framed && n != wire::kFrameBytes)) {
      fail(ErrorKind::Protocol,
           fmt::format("{} broke the sealed protocol: its record number {} on {} says it holds "
                       "{} bytes ({} expected): the stream was changed on its way",
                       table.describe_peer(rank), s.opener.records(), lane_name(lane, false), n,
                       lane.framed ? fmt::format("1 to {}", most)
                                   : std::to_string(wire::kFrameBytes)));
      return false;
    }
    if (avail < n + seal::kOverheadBytes) return true;
    auto* out = lane.framed ? reinterpret_cast<std::uint8_t*>(chunk_target(lane) + lane.got)
                            : lane.frame_in.data();
    if (!s.opener.open(s.in.data() + s.in_begin, n, out)) {
      std::memset(out, 0, n);
      fail(ErrorKind::Protocol,
           fmt::format("{} sent a sealed record (number {}, {} bytes) on {} that fails its "
                       "authentication: it was changed, forged, cut, replayed or reordered on "
                       "its way; none of it was used",
                       table.describe_peer(rank), s.opener.records() - 1, n,
                       lane_name(lane, false)));
      return false;
    }
    s.in_begin += n + seal::kOverheadBytes;
    if (s.in_begin == s.in_end) s.in_begin = s.in_end = 0;
    if (lane.framed)
      chunk_bytes(lane, n);
    else
      new_frame(lane);
  }
  return false;
}

void PeerStream::receive_lane_sealed(Lane& lane) {
  auto& s = *lane.sealed;
  for (;;) {
    if (!open_lane_records(lane)) return;
    if (s.in_begin > 0) {  // a record's first bytes go to the front
      std::memmove(s.in.data(), s.in.data() + s.in_begin, s.in_end - s.in_begin);
      s.in_end -= s.in_begin;
      s.in_begin = 0;
    }
    const std::size_t asked = s.in.size() - s.in_end;
    const ssize_t n = ::recv(lane.fd(), s.in.data() + s.in_end, asked, MSG_DONTWAIT);
    if (n == 0) {
      lane_closed(lane);
      return;
    }
    if (n < 0) {
      if (lane_retry_after(lane, errno)) continue;
      return;
    }
    s.in_end += static_cast<std::size_t>(n);
    if (static_cast<std::size_t>(n) < asked) {  // drained: open what came and stop
      open_lane_records(lane);
      return;
    }
  }
}

}  // namespace collie::transport::tcp
