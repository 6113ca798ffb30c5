// A pair's lanes: the extra connections that carry its large messages
// beside the pair's own connection (docs/transport.md, "Lanes").
//
// One TCP flow often cannot fill a link: clouds cap each flow, one core
// receives only so fast, a host may have several NICs. So a rank opens up
// to COLLIE_STREAMS sending lanes to a peer (hello lane = 1, 2, ...; each
// handshake keyed and, between hosts, sealed on its own) the first time it
// sends that peer a message of kStripeFrom bytes or more. Each lane carries
// one direction only: the peer opens its own to send back.
//
// Sending: a message of kStripeFrom or more, while the lanes are open, is
// striped: its header goes on the pair's connection with the length's
// kStriped bit, and its payload is cut in chunks of kChunkBytes, each a
// frame (sequence, offset, length) and its bytes. A lane takes the next
// chunk of the message at the head of the queue when poll() says it can
// write; with TCP_NOTSENT_LOWAT that is when the kernel holds less than
// kLowWater bytes it has not yet sent, so a lane whose flow drains faster
// takes more chunks, and the pair is not held to its slowest flow times
// the lanes' count. A lane with bytes still queued also leaves the chunk
// to another that would deliver it sooner, by the bytes each has queued
// and its measured rate: it rests a moment (lane_rests()). The next
// message's header follows on the pair's
// connection at once, and its chunks after the last of this one's; a
// striped send completes once every chunk is in a kernel (it may complete
// after sends queued behind it).
//
// Receiving: the pair's connection reads the header, matches it as any
// message (a posted receive, the unexpected queue, or a pause), then reads
// nothing more until the message is whole (Rx::Striped). Each lane reads a
// frame, then its chunk straight into the receive's buffer (or the queued
// message's) at the chunk's offset; a consuming receive gets each chunk
// whole, at its offset, in the order chunks arrive. A chunk of a message
// the connection has not yet begun waits in its lane, which is not read
// meanwhile. Sealed, a frame and its chunk are two records: the chunk's
// is opened straight into the buffer, as on the pair's connection.
//
// A lane that fails fails the pair, named, as its connection's failure
// does; a sending lane whose data or window probes go unanswered is
// failed as the pair's connection would be (check_alive()), and a waiting
// lane is watched for errors though not read. Guarded by the table's
// lock, as the PeerStream that holds it.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <collie/seal.hpp>

#include "request.hpp"
#include "sealed_stream.hpp"
#include "sockets.hpp"
#include "wire.hpp"

namespace collie::transport::tcp {

// Messages of this size or more are striped over the lanes, when open.
inline constexpr std::size_t kStripeFrom = 128 * 1024;
// The chunk a lane takes at a time: one sealed record, whose plaintext a
// receiver opens straight into the buffer (flush_lane_sealed()).
inline constexpr std::size_t kChunkBytes = seal::kMaxRecordBytes;
// The chunks a striped message of `bytes` is cut in (the sender's map of
// which lane took each, the receiver's of which came: lane_failover.cpp).
inline std::size_t chunks_of(std::uint64_t bytes) {
  return static_cast<std::size_t>((bytes + kChunkBytes - 1) / kChunkBytes);
}
// A sending lane is writable while its kernel holds fewer unsent bytes.
inline constexpr int kLowWater = 256 * 1024;

struct Lane {
  Lane(int lane_number, Descriptor c, std::unique_ptr<SealedState> seal)
      : number(lane_number), connection(std::move(c)), sealed(std::move(seal)) {}

  int fd() const { return connection.get(); }

  int number;  // 1, 2, ...: the hello's lane
  Descriptor connection;
  // Lost (lane_failover.cpp): shut down, no longer polled or used; its
  // chunks went again over the others.
  bool lost = false;
  // A sending lane's source address, where it leaves from another NIC than
  // the pair's connection (lane_paths.hpp); "": the same.
  std::string from;
  std::unique_ptr<SealedState> sealed;
  std::uint64_t chunks = 0;  // moved so far, for `collie explain` and the logs
  std::uint64_t bytes = 0;
  // A sending lane's: since when check_alive() has seen it go unanswered.
  std::chrono::steady_clock::time_point unacked_since{};
  // A sending lane's rate (bytes a second, the kernel's latest sample,
  // read at `rate_read`), and until when it takes no chunk: others would
  // deliver the next one sooner (PeerStream::lane_rests()).
  double rate = 0;
  std::chrono::steady_clock::time_point rate_read{};
  std::chrono::steady_clock::time_point rest_until{};

  // Sending: the highest message number of a chunk it took: a chunk sent
  // again goes only on a lane with nothing of a later message before it
  // (lane_failover.cpp).
  std::uint64_t last_sequence = 0;
  // Sending: the chunk under way (request null: none).
  TcpRequest* request = nullptr;
  std::array<std::uint8_t, wire::kFrameBytes> frame{};
  std::size_t frame_sent = 0;
  const std::byte* data = nullptr;
  std::size_t length = 0;
  std::size_t sent = 0;

  // Receiving: the frame read (`framed`), the bytes of its chunk read.
  std::array<std::uint8_t, wire::kFrameBytes> frame_in{};
  std::size_t frame_got = 0;
  bool framed = false;
  bool checked = false;  // the frame was found to fit its message
  wire::Frame current{};
  std::size_t got = 0;
  // Its chunk belongs to a message the connection has not begun: not read
  // until it has.
  bool waiting = false;
  // Its chunk belongs to a confirmed message already whole (sent again
  // after a lane was lost): read and dropped.
  bool stale = false;
  // A chunk for a consuming receive or one being dropped (allocated on
  // first use).
  std::vector<std::uint8_t> staging;
};

// A sending lane's load: bytes written and not yet acknowledged, and its
// rate (bytes a second; 0: not known).
struct LaneLoad {
  std::size_t queued = 0;
  double rate = 0;
};
// How long a lane loaded as `mine` leaves the next chunk (`n` bytes) to the
// `others`, one of which would deliver it well before it would: zero when
// it takes the chunk (always while it is idle or its rate is unknown), at
// most 2 ms.
std::chrono::nanoseconds lane_rest(LaneLoad mine, std::span<const LaneLoad> others,
                                   std::size_t n);

}  // namespace collie::transport::tcp
