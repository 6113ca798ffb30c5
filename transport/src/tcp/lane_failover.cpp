// A lane lost while the pair goes on (lanes.hpp, lane_paths.hpp).
//
// Where a rank's lanes to a peer leave from more than one interface, a NIC
// may die while the others, and the pair's own connection, still reach the
// peer. Its striped sends then ask to be confirmed whole (wire::kConfirm):
// each is kept, with the lane that took each chunk, until the peer's
// confirmation comes back on the pair's connection (a header of its own,
// wire::kWhole). A sending lane that fails or goes unanswered
// (check_alive()) is then lost, not the pair: it is shut down, and every
// chunk it took of a send not yet confirmed goes again over the lanes left,
// before any new chunk. The receiver reads each chunk of a confirmed
// message once (PeerStream::chunks_in) and drops a chunk that comes again
// after the message is whole (Lane::stale); a receiving lane of a peer that
// confirms is lost the same way when it fails or closes. Where the lanes
// all leave from one interface, or none would be left, a lost lane fails
// the pair, named, as before. Guarded by the table's lock.
#include <algorithm>
#include <sys/socket.h>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "../block_pool.hpp"
#include "connections.hpp"
#include "peer_stream.hpp"

namespace collie::transport::tcp {

static std::uint64_t sequence_of(const TcpRequest& r) {
  return wire::get64(r.header.data() + 8);
}

bool PeerStream::lanes_spread() const {
  const Lane* first = nullptr;
  for (const auto& lane : out_lanes) {
    if (lane->lost) continue;
    if (first == nullptr)
      first = lane.get();
    else if (lane->from != first->from)
      return true;
  }
  return false;
}

bool PeerStream::lose_lane(const Lane& which, const std::string& why) {
  if (state != PeerState::Ready) return false;
  const auto find = [&](std::vector<std::unique_ptr<Lane>>& among) -> Lane* {
    for (auto& lane : among)
      if (lane.get() == &which) return lane.get();
    return nullptr;
  };
  if (Lane* lane = find(out_lanes)) {
    if (lane->lost) return true;
    // Every striped send under way must be one the peer will confirm, and
    // another lane must be left to carry its chunks.
    for (const auto& r : sends)
      if (r->striped && !r->confirm) return false;
    const int streams = table.streams.load(std::memory_order_relaxed);
    std::size_t left = 0;
    for (const auto& other : out_lanes)
      if (other.get() != lane && !other->lost && other->connection.valid() &&
          other->number <= streams)
        ++left;
    if (left == 0) return false;
    lane->lost = true;
    lane->request = nullptr;  // its chunk goes again with the others
    if (lane->sealed) lane->sealed->out_begin = lane->sealed->out_end = 0;
    ::shutdown(lane->fd(), SHUT_RDWR);  // closed by the transport: pollers may hold it
    std::size_t again = 0;
    for (const auto& r : sends) {
      if (!r->confirm || r->confirmed) continue;
      for (std::size_t i = 0; i < r->chunk_lanes.size(); ++i) {
        if (r->chunk_lanes[i] != lane->number) continue;
        r->chunk_lanes[i] = 0;
        redo_.push_back({r.get(), i});
        ++again;
      }
    }
    // In the order they were sent: a receiver reads a lane's chunk only
    // once its message is begun, so a chunk of a later message taken
    // first would hold that lane while an earlier one waits (two lanes
    // lost one after the other each add their own).
    std::sort(redo_.begin(), redo_.end(), [](const Redo& a, const Redo& b) {
      const auto sa = sequence_of(*a.request);
      const auto sb = sequence_of(*b.request);
      return sa != sb ? sa < sb : a.chunk < b.chunk;
    });
    collie::log().warn(
        "rank {}: {}{} is lost: {}; its {} chunk(s) not yet confirmed go again over the {} "
        "lane(s) left",
        table.opt.rank, lane_name(*lane, true), lane->from.empty() ? "" : ", from " + lane->from,
        why, again, left);
    to_reopen.emplace_back(lane->number, lane->from);
    if (table.lanes_lost) table.lanes_lost();
    table.wake_pollers(/*urgent=*/true);
    return true;
  }
  if (Lane* lane = find(in_lanes)) {
    if (lane->lost) return true;
    // The peer sends what this lane carried again only where it confirms.
    if (!peer_confirms || (rx == Rx::Striped && !current_confirm)) return false;
    lane->lost = true;
    lane->waiting = false;
    ::shutdown(lane->fd(), SHUT_RDWR);
    collie::log().warn("rank {}: {} is lost: {}; the peer sends its chunks again", table.opt.rank,
                       lane_name(*lane, false), why);
    return true;
  }
  return false;
}

void PeerStream::reopen_out_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal,
                                 std::string from) {
  for (auto& slot : out_lanes) {
    if (slot->number != number || !slot->lost) continue;
    retired_out.push_back(std::move(slot));
    slot = std::make_unique<Lane>(number, std::move(c), std::move(seal));
    slot->from = std::move(from);
    set_low_water(*slot);
    return;
  }
  add_out_lane(number, std::move(c), std::move(seal), std::move(from));
}

bool PeerStream::reopen_in_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal) {
  if (!peer_confirms) return false;
  for (auto& slot : in_lanes) {
    if (slot->number != number) continue;
    if (!slot->lost) {  // lost on the peer's side first: its chunks come again on this one
      slot->lost = true;
      ::shutdown(slot->fd(), SHUT_RDWR);
    }
    retired_in.push_back(std::move(slot));
    slot = std::make_unique<Lane>(number, std::move(c), std::move(seal));
    collie::log().warn("rank {}: {} opened again", table.opt.rank, lane_name(*slot, false));
    return true;
  }
  return false;
}

bool PeerStream::redo_for(const Lane& lane) const {
  return !redo_.empty() && sequence_of(*redo_.back().request) >= lane.last_sequence;
}

bool PeerStream::take_redo(Lane& lane) {
  // The first the lane may take (they are in the order sent).
  auto it = std::find_if(redo_.begin(), redo_.end(), [&](const Redo& d) {
    return sequence_of(*d.request) >= lane.last_sequence;
  });
  if (it == redo_.end()) return false;
  auto [r, chunk] = *it;
  const std::size_t offset = chunk * kChunkBytes;
  const std::size_t n = std::min(kChunkBytes, r->bytes - offset);
  if (lane_rests(lane, n)) return false;
  redo_.erase(it);
  give_chunk(lane, *r, offset, n);
  return true;
}

void PeerStream::whole_confirmed(std::uint64_t sequence) {
  for (const auto& p : sends) {
    auto& r = *p;
    if (!r.confirm || !r.header_built || wire::get64(r.header.data() + 8) != sequence) continue;
    if (r.confirmed || r.dispensed < r.bytes) break;  // twice, or before every chunk went
    r.confirmed = true;
    std::erase_if(redo_, [&](const Redo& d) { return d.request == &r; });
    complete_if_confirmed(r);
    return;
  }
  fail(ErrorKind::Protocol,
       fmt::format("{} broke the protocol: it confirmed message number {} whole, which this rank "
                   "has not sent it whole to be confirmed",
                   table.describe_peer(rank), sequence));
}

void PeerStream::complete_if_confirmed(TcpRequest& r) {
  if (!r.confirmed || r.header_sent < wire::kHeaderBytes) return;
  for (const auto& lane : out_lanes)
    if (lane->request == &r) return;  // a chunk sent again is still being written
  r.moved = r.bytes;
  complete_send(r);
}

void PeerStream::confirm_whole(std::uint64_t sequence) {
  auto r = make_pooled<TcpRequest>(rank, true, Tag{0}, nullptr, 0, 0);
  r->whole = true;
  r->whole_of = sequence;
  table.started();  // no caller waits: it completes once written
  post_send(r);
  if (r->pending()) table.wake_pollers(/*urgent=*/true);
}

}  // namespace collie::transport::tcp
