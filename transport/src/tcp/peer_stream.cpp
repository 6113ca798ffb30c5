// One peer's framed stream: its failure, the receive state machine,
// matching by tag (peer_stream.hpp; its send queue: peer_send.cpp).
#include "peer_stream.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>
#include <sys/socket.h>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "connections.hpp"
#include "flow_stats.hpp"

namespace collie::transport::tcp {

namespace {

constexpr std::size_t kStagingBytes = 64 * 1024;
constexpr std::size_t kDirectReadMin = 4096;  // smaller payloads go through the staging buffer

}  // namespace

void PeerStream::open(Descriptor c, std::unique_ptr<SealedState> seal) {
  connection = std::move(c);
  state = PeerState::Ready;
  sealed = std::move(seal);
  // Sealed, it takes a whole record's plaintext behind a header's first
  // bytes and a consuming receive's phase (open_records()).
  staging.assign(sealed ? seal::kMaxRecordBytes + wire::kHeaderBytes + kPhase : kStagingBytes, 0);
}

std::string PeerStream::closed_reason() const {
  return fmt::format("{} closed the connection (it exited, crashed or was killed)",
                     table.describe_peer(rank));
}

bool PeerStream::retry_after(int error) {
  if (error == EINTR) return true;
  if (error != EAGAIN && error != EWOULDBLOCK) fail(ErrorKind::Connection, error_reason(error));
  return false;
}

std::string PeerStream::error_reason(int error) const {
  if (error == EPIPE || error == ECONNRESET) return closed_reason();
  if (error == ETIMEDOUT || error == EHOSTUNREACH || error == ENETUNREACH)
    return fmt::format(
        "{} cannot be reached: the connection to it timed out ({}; keep-alive probes or data got "
        "no answer): its host is down, or the network between is cut",
        table.describe_peer(rank), std::strerror(error));
  return fmt::format("the connection to {} failed: {}", table.describe_peer(rank),
                     std::strerror(error));
}

std::string PeerStream::silent_for(int fd, std::chrono::steady_clock::time_point& since,
                                   std::chrono::steady_clock::time_point now) {
  const auto h = tcp_health(fd);
  if (!h.known || !(h.retransmitting || h.probing)) {
    since = {};
    return {};
  }
  if (since == std::chrono::steady_clock::time_point{}) since = now;
  if (now - since < kLostAfter || h.since_last_ack < kLostAfter) return {};
  const auto seconds = h.since_last_ack.count() / 1000;
  return h.retransmitting
             ? fmt::format("data sent to it has gone unacknowledged for {} s (retransmitted)",
                           seconds)
             : fmt::format("its receive window is closed and the probes sent to it have gone "
                           "unanswered for {} s",
                           seconds);
}

void PeerStream::check_alive(std::chrono::steady_clock::time_point now) {
  if (state != PeerState::Ready || !connection.valid()) return;
  // The pair's connection, then each sending lane: a striped message's
  // bytes wait in the lanes while the connection itself may be idle.
  std::string why = silent_for(fd(), unacked_since, now);
  std::string where;
  for (auto& lane : out_lanes) {
    if (!why.empty()) break;
    if (!lane->connection.valid() || lane->lost) continue;
    why = silent_for(lane->fd(), lane->unacked_since, now);
    if (!why.empty() &&
        lose_lane(*lane,
                  fmt::format("{}: its interface is down, or the network between is cut", why)))
      why.clear();  // the other lanes carry on
    if (!why.empty()) where = on_lane(*lane);
  }
  if (why.empty()) return;
  fail(ErrorKind::Connection,
       fmt::format("{} cannot be reached: {}: its host is down, or the network between is cut{}",
                   table.describe_peer(rank), why, where));
}

void PeerStream::socket_failed(int fd, const Lane* lane) {
  int error = 0;
  socklen_t length = sizeof error;
  if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
  if (error == 0 || error == EAGAIN || error == EWOULDBLOCK || error == EINTR) {
    // A hang-up with no error to say: the peer's end is closed.
    if (lane != nullptr) lane_closed(*lane);
    else fail(ErrorKind::Connection, closed_reason());
    return;
  }
  if (lane != nullptr) lane_retry_after(*lane, error);
  else retry_after(error);
}

std::string PeerStream::on_lane(const Lane& lane) {
  return fmt::format(" (on lane {})", lane.number);
}

void PeerStream::fail(ErrorKind kind, const std::string& reason) {
  if (state == PeerState::Failed) return;
  const bool affects_work = !sends.empty() || !posted.empty() || current_recv;
  // A peer that closes with nothing pending may simply have finished.
  collie::log().log(affects_work ? spdlog::level::warn : spdlog::level::debug, "rank {}: {}",
                    table.opt.rank, reason);
  state = PeerState::Failed;
  undispensed_ = 0;
  redo_.clear();
  if (rx == Rx::Paused) --table.paused_peers;
  rx = Rx::Header;
  failure = reason;
  failure_kind = kind;
  if (connection.valid()) ::shutdown(fd(), SHUT_RDWR);  // closed later: pollers may hold it
  for (auto& r : sends)
    table.fail_for_peer(*r, kind, reason);
  sends.clear();
  if (current_recv) {
    table.fail_for_peer(*current_recv, kind, reason);
    current_recv.reset();
  }
  if (striped_handover) {
    table.fail_for_peer(*striped_handover, kind, reason);
    striped_handover.reset();
  }
  if (current_unexpected && !current_unexpected->complete) {
    unexpected.erase(current.tag, current_unexpected);
    table.pool.release(*current_unexpected);
    current_unexpected.reset();
  }
  fail_lanes();
  posted.drain([&](const TcpRequestPtr& r) { table.fail_for_peer(*r, kind, reason); });
  table.state_cv.notify_all();
  table.wake_pollers();
}

// ---- receiving ----

void PeerStream::post_recv(TcpRequestPtr r) {
  if (auto u = unexpected.take_first(r->tag)) {
    table.pool.release(*u);
    const bool in_flight = !u->complete;
    if (in_flight && current_striped && u == current_unexpected) {
      // Its chunks come in any order: the receive gets it whole, once it is.
      if (u->length != r->bytes) {
        table.fail_size_mismatch(*r, u->length, u->fingerprint);
        current_unexpected.reset();  // the rest is read and dropped
      } else {
        r->fingerprint = u->fingerprint;
        striped_handover = std::move(r);
      }
      table.resume_paused();
      return;
    }
    if (u->length != r->bytes) {
      table.fail_size_mismatch(*r, u->length, u->fingerprint);
      if (in_flight) current_unexpected.reset();  // the rest is read and dropped
    } else {
      r->fingerprint = u->fingerprint;
      const bool taken = u->got == 0 || deliver(*r, 0, {u->data.get(), u->got});
      r->moved = u->got;
      if (in_flight) {  // the rest goes straight to the receive (or is dropped)
        current_unexpected.reset();
        if (taken) current_recv = r;
      } else if (taken) {
        table.complete(*r);
      }
      // Its bytes are delivered either way: the buffer serves the next
      // message of its size (a segment caught half-read when its receive
      // was posted, a few in a hundred in a 1 MiB all_reduce on 2 ranks, was
      // freed here, and its successor's fresh buffer cost a page fault a
      // call).
      table.pool.recycle(std::move(u->data), u->length);
    }
    table.resume_paused();
    return;
  }
  if (state == PeerState::Failed) {
    table.fail_for_peer(*r, failure_kind, failure);
    return;
  }
  const Tag tag = r->tag;
  posted.push(tag, std::move(r));
  if (rx == Rx::Paused && current.tag == tag) table.resume_paused();
}

bool PeerStream::withdraw(const TcpRequestPtr& r) {
  if (r->is_send) {
    if (r->header_built) return false;
    sends.erase_value(r);
    return true;
  }
  if (striped_handover == r) {
    striped_handover.reset();  // the message it waits for is dropped once whole
    return true;
  }
  if (current_recv == r) {
    // Half-way through its message: the rest is read and dropped, so the
    // stream stays in step and the peer is not cut off (it may be alive and
    // well: a mismatch or a timeout here is no reason to drop its link).
    current_recv.reset();
    return true;
  }
  posted.erase(r->tag, r);
  return true;
}

bool PeerStream::deliver(TcpRequest& r, std::size_t offset, std::span<const std::byte> piece) {
  if (!r.consume) {
    std::memcpy(r.data + offset, piece.data(), piece.size());
    return true;
  }
  try {
    r.consume(offset, piece);
    return true;
  } catch (const std::exception& e) {
    table.fail(r, ErrorKind::Request,
               fmt::format("{} failed: its consumer threw at byte {}: {} (the rest of the "
                           "message is dropped)",
                           table.describe_request(r), offset, e.what()));
    return false;
  }
}

std::byte* PeerStream::current_target() {
  if (current_recv) return current_recv->consume ? nullptr : current_recv->data;
  if (current_unexpected) return current_unexpected->data.get();
  return nullptr;
}

void PeerStream::finish_message() {
  if (current_recv) {
    table.complete(*current_recv);
    current_recv.reset();
  }
  if (current_unexpected) {
    current_unexpected->complete = true;
    if (striped_handover) {  // a receive matched half-way (post_recv)
      auto r = std::move(striped_handover);
      auto& u = *current_unexpected;
      if (deliver(*r, 0, {u.data.get(), u.length})) {
        r->moved = u.length;
        table.complete(*r);
      }
      table.pool.recycle(std::move(u.data), u.length);
    }
    current_unexpected.reset();
  }
  rx = Rx::Header;
  if (current_striped) {
    current_striped = false;
    resume_connection_ = true;  // it reads on (pump())
    if (std::exchange(current_confirm, false)) confirm_whole(current.sequence);
  }
}

void PeerStream::account(std::size_t n) {
  current_got += n;
  if (current_recv) current_recv->moved = current_got;
  if (current_unexpected) current_unexpected->got = current_got;
  if (current_got == current.length) finish_message();
}

void PeerStream::begin_message() {
  const auto& h = current;
  if (rx == Rx::Paused) --table.paused_peers;  // trying again
  last_large = h.length >= kStagingBytes;
  current_got = 0;
  current_recv.reset();
  current_unexpected.reset();
  if (auto r = posted.take_first(h.tag)) {
    if (r->bytes != h.length) {
      table.fail_size_mismatch(*r, h.length, h.fingerprint);
    } else {
      r->fingerprint = h.fingerprint;
      current_recv = std::move(r);
    }
  } else {
    if (!table.pool.fits(h.length)) {
      rx = Rx::Paused;
      ++table.paused_peers;
      collie::log().debug("rank {}: pausing reads from rank {}: unexpected-message queue full",
                          table.opt.rank, rank);
      return;
    }
    auto u = table.pool.hold(h.length, h.fingerprint);
    unexpected.push(h.tag, u);
    current_unexpected = std::move(u);
  }
  rx = current_striped ? Rx::Striped : Rx::Payload;
  if (current_confirm) chunks_in.assign(chunks_of(h.length), 0);
  if (h.length == 0) {
    finish_message();
  } else if (current_striped) {
    kick_lanes_ = true;  // lanes waiting for it read on (pump())
  }
}

bool PeerStream::resume() {
  begin_message();
  return rx != Rx::Paused;
}

bool PeerStream::parse_staged() {
  for (;;) {
    if (state != PeerState::Ready) return false;
    if (rx == Rx::Paused || rx == Rx::Striped) return false;
    const std::size_t avail = staged_end - staged_begin;
    if (rx == Rx::Header) {
      if (avail < wire::kHeaderBytes) return true;
      current = wire::decode_header(staging.data() + staged_begin);
      staged_begin += wire::kHeaderBytes;
      current_striped = (current.length & wire::kStriped) != 0;
      current_confirm = current_striped && (current.length & wire::kConfirm) != 0;
      const bool whole = (current.length & wire::kWhole) != 0;
      current.length &= ~wire::kLengthFlags;
      if (current.sequence != recv_sequence) {
        fail(ErrorKind::Protocol,
             fmt::format("{} broke the protocol: message number {} arrived, {} was next",
                         table.describe_peer(rank), current.sequence, recv_sequence));
        return false;
      }
      ++recv_sequence;
      if (whole) {  // the peer confirms one of this rank's striped sends whole
        current_striped = false;
        whole_confirmed(current.fingerprint);
        continue;
      }
      if (current_confirm && !peer_confirms) peer_confirms = true;
      begin_message();
      continue;
    }
    if (avail == 0) return true;
    const std::size_t take = std::min(avail, current_remaining());
    const auto* piece = reinterpret_cast<const std::byte*>(staging.data() + staged_begin);
    if (current_recv && current_recv->consume) {
      if (!deliver(*current_recv, current_got, {piece, take})) current_recv.reset();  // dropped
    } else if (auto* target = current_target()) {
      std::memcpy(target + current_got, piece, take);
    }
    staged_begin += take;
    account(take);
  }
}

void PeerStream::receive() {
  receive_connection();
  pump();
}

void PeerStream::pump() {
  if (pumping_) return;  // the outer call runs what this one would
  pumping_ = true;
  while (state == PeerState::Ready && (kick_lanes_ || resume_connection_)) {
    if (std::exchange(kick_lanes_, false)) {
      for (auto& lane : in_lanes)
        if (lane->waiting && rx == Rx::Striped) receive_lane(*lane);
    }
    if (std::exchange(resume_connection_, false)) receive_connection();
  }
  kick_lanes_ = resume_connection_ = false;
  pumping_ = false;
}

void PeerStream::receive_connection() {
  if (sealed) return receive_sealed();
  for (;;) {
    if (!parse_staged()) return;
    if (staged_begin == staged_end) staged_begin = staged_end = 0;
    ssize_t n = 0;
    std::size_t asked = 0;
    auto* target = current_target();
    if (rx == Rx::Payload && staged_begin == staged_end && target != nullptr &&
        current_remaining() >= kDirectReadMin) {
      iovec pieces[2] = {{target + current_got, current_remaining()},
                         {staging.data(), staging.size()}};
      asked = pieces[0].iov_len + pieces[1].iov_len;
      msghdr message{};
      message.msg_iov = pieces;
      message.msg_iovlen = 2;
      n = ::recvmsg(fd(), &message, MSG_DONTWAIT);
      if (n > 0) {
        const std::size_t direct = std::min(static_cast<std::size_t>(n), current_remaining());
        staged_begin = 0;
        staged_end = static_cast<std::size_t>(n) - direct;
        account(direct);
      }
    } else {
      if (staged_begin == staged_end && rx == Rx::Payload && current_recv &&
          current_recv->consume) {
        // A consuming receive: byte o of its payload lands at an address
        // that is o modulo kPhase, so that its elements stay aligned in the
        // pieces it is handed (a piece that ended mid-element would shift
        // every later one).
        staged_begin = staged_end = current_got % kPhase;
      } else if (staged_begin > 0) {
        std::memmove(staging.data(), staging.data() + staged_begin, staged_end - staged_begin);
        staged_end -= staged_begin;
        staged_begin = 0;
      }
      asked = staging.size() - staged_end;
      // After a large message the next is likely large too: read its
      // header and a little, so that most of its payload is read straight
      // to its receive instead of copied out of here (a 1 MiB all_reduce
      // on 2 ranks copied 64 KiB of each plain segment so).
      if (rx == Rx::Header && staged_end == 0 && last_large)
        asked = std::min(asked, wire::kHeaderBytes + kDirectReadMin);
      n = ::recv(fd(), staging.data() + staged_end, asked, MSG_DONTWAIT);
      if (n > 0) staged_end += static_cast<std::size_t>(n);
    }
    if (n == 0) {
      fail(ErrorKind::Connection, closed_reason());
      return;
    }
    if (n < 0) {
      if (retry_after(errno)) continue;
      return;
    }
    if (static_cast<std::size_t>(n) < asked) {  // drained: parse and stop
      parse_staged();
      return;
    }
  }
}

void PeerStream::queued_fingerprints(Tag tag,
                                     std::vector<std::pair<int, std::uint64_t>>& out) const {
  if (const auto* queued = unexpected.find(tag))
    for (const auto& u : *queued)
      out.emplace_back(rank, u->fingerprint);
}

}  // namespace collie::transport::tcp
