// One peer's framed byte stream: the messages this rank sends it, and the
// receive state machine that matches what it sends to posted receives.
//
// Sending: requests queue in order; flush() writes as many headers and
// payloads as the kernel takes in one sendmsg (up to 64 pieces) and
// completes those fully written. A send posted to an empty queue writes
// its first 64 KiB at once; the poller writes the rest. Receiving: bytes are parsed as
// header, payload, header...; a payload of 4 KiB or more bound for a
// caller's buffer is read straight into it (the staging buffer as the second
// piece, so the next header comes in the same call), smaller ones through a
// 64 KiB staging buffer. A header is matched, by tag, with the first posted
// receive, or queued as unexpected (UnexpectedPool), or, when the queue is
// full, pauses reading (Rx::Paused) until a receive or free space resumes it.
//
// Invariants: sequence numbers count messages per direction from 0 (a gap
// is a protocol error); `current_recv` or `current_unexpected` is the target
// of the payload being read, or neither when it is being dropped; a Failed
// stream never leaves that state. Every member is guarded by the table's
// lock (connections.hpp), and every method runs with it held.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <sys/uio.h>
#include <utility>
#include <vector>

#include <collie/transport/tcp.hpp>

#include "../tag_queues.hpp"
#include "lanes.hpp"
#include "request.hpp"
#include "sealed_stream.hpp"
#include "sockets.hpp"
#include "unexpected_pool.hpp"
#include "wire.hpp"

namespace collie::transport::tcp {

class Connections;

enum class PeerState { Unconnected, Connecting, Ready, Failed };
// Striped: the message begun comes over the lanes (lanes.hpp); the
// connection reads nothing more until it is whole.
enum class Rx { Header, Payload, Paused, Striped };
// Whether this rank's sending lanes to a peer are open.
enum class LanesState { None, Opening, Open, Unavailable };

struct PeerStream {
  // A consuming receive's byte o lands at o modulo this in the staging
  // buffer: the widest element, and malloc's alignment.
  static constexpr std::size_t kPhase = 16;

  PeerStream(Connections& connections, int peer_rank) : table(connections), rank(peer_rank) {}

  // The connection's descriptor, for poll(); -1 without one.
  int fd() const { return connection.get(); }
  // Takes `c` (connected, handshake done, tuned) as this peer's
  // connection: Ready; sealed when `seal` is given (sealed_stream.hpp).
  void open(Descriptor c, std::unique_ptr<SealedState> seal = nullptr);
  // Something waits to be written: a queued send, or sealed bytes.
  bool wants_to_write() const;
  // Lanes (lanes.cpp). Adds a sending lane (this rank's, `number`) or a
  // receiving one (the peer's).
  void add_out_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal,
                    std::string from = {});
  void add_in_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal);
  // A lost lane's number opened again (lane_keeper.hpp): this rank's, in
  // the lost one's place; or the peer's, in place of its lane of that
  // number, lost or not yet seen to be (false: the peer does not confirm,
  // and its lane of that number is not to be replaced).
  void reopen_out_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal,
                       std::string from);
  bool reopen_in_lane(int number, Descriptor c, std::unique_ptr<SealedState> seal);
  // Whether a sending lane has a chunk to write, or may take one.
  bool lane_wants_to_write(const Lane& lane) const;
  // Writes the lane's chunk, or takes the next and writes it (poll() said
  // it may: at most one new chunk a call).
  void flush_lane(Lane& lane);
  // Reads what a receiving lane has, while its chunks' message is begun.
  void receive_lane(Lane& lane);

  // Queues a send and, if the queue was empty, writes at once.
  void post_send(TcpRequestPtr r);
  // This rank's own stream: a send to oneself, copied into the posted
  // receive or buffered as unexpected (whatever the queue holds).
  void send_to_self(TcpRequest& r);
  // Matches a receive with a queued message, or posts it.
  void post_recv(TcpRequestPtr r);
  // Removes a request (a wait that timed out): one that has moved no byte
  // yet, or a receive half-way (the rest of its message is dropped); false
  // for a send under way (or a finished request).
  bool withdraw(const TcpRequestPtr& r);

  // Writes what the kernel takes (up to `budget` bytes); reads what the
  // socket has.
  void flush(std::size_t budget = SIZE_MAX);
  void receive();
  // A paused stream tries its waiting message again: true if it reads on.
  bool resume();

  // Fails the stream: every queued, posted and half-moved request fails
  // with `reason`, and so does every later one.
  void fail(ErrorKind kind, const std::string& reason);

  // Fails a Ready stream one of whose sending connections (its own or a
  // sending lane) has had its unacknowledged data retransmitted, or its
  // probes go out, with no acknowledgement, for kLostAfter (sockets.hpp):
  // its host is gone or cut off. A stopped peer's kernel still
  // acknowledges, so it stays.
  // Called about once a second.
  void check_alive(std::chrono::steady_clock::time_point now);

  // poll() found an error or hang-up on a connection this stream is not
  // reading now (its own while paused or reading a striped message, or a
  // waiting lane's: `lane`, else null): fails it with the socket's error.
  // Without this, keep-alive's verdict on a connection nobody reads would
  // go unseen while its lanes wait on a host that is gone.
  void socket_failed(int fd, const Lane* lane);

  // What each sending lane carried, and its rate while busy (the debug log),
  // and every lane's use (TcpTransport::lanes()).
  std::string lanes_report() const;
  std::vector<TcpTransport::LaneUse> lane_uses() const;

  // (peer, fingerprint) of each message queued under `tag`.
  void queued_fingerprints(Tag tag, std::vector<std::pair<int, std::uint64_t>>& out) const;

  Connections& table;
  const int rank;
  PeerState state = PeerState::Unconnected;
  Descriptor connection;  // shut down on failure, closed by the transport
  std::string published;  // host:port it listens on, from the store
  std::string address;    // host:port of its end of an accepted connection
  std::string failure;
  ErrorKind failure_kind = ErrorKind::None;
  // Since when check_alive() has seen it retransmit or probe without an ack.
  std::chrono::steady_clock::time_point unacked_since{};
  // Why its host looks gone, from `fd`'s TCP_INFO; empty while it does not
  // (or not for kLostAfter since `since`, which it keeps).
  static std::string silent_for(int fd, std::chrono::steady_clock::time_point& since,
                                std::chrono::steady_clock::time_point now);
  // Sending.
  Fifo<TcpRequestPtr> sends;
  std::uint64_t send_sequence = 0;

  // Receiving.
  std::vector<std::uint8_t> staging;
  std::size_t staged_begin = 0;
  std::size_t staged_end = 0;
  Rx rx = Rx::Header;
  wire::Header current{};
  std::size_t current_got = 0;
  TcpRequestPtr current_recv;
  std::shared_ptr<Unexpected> current_unexpected;
  std::uint64_t recv_sequence = 0;
  // The last message begun was a staging buffer or more. (current.length
  // says as much while rx is Header, but without this member a 2-rank
  // sweep's first 1 MiB row ran slower, and a member of no use in its place
  // restored it: the layout, not the logic; see the commit that kept it.)
  bool last_large = false;
  TagQueues<TcpRequestPtr> posted;
  TagQueues<std::shared_ptr<Unexpected>> unexpected;
  // The connection's records, when it is sealed; null in the clear.
  std::unique_ptr<SealedState> sealed;

  // Lanes (lanes.hpp): this rank's sending lanes to the peer, and the
  // peer's to this rank. Each a unique_ptr: a poller holds a lane's index.
  LanesState lanes = LanesState::None;
  bool lanes_final = false;  // a lane failed to open: no more attempts
  std::vector<std::unique_ptr<Lane>> out_lanes;
  std::vector<std::unique_ptr<Lane>> in_lanes;
  // The message begun came striped (Rx::Striped while it is read), and
  // asks to be confirmed whole (wire::kConfirm): then `chunks_in` says
  // which of its chunks came (a chunk sent again is read once).
  bool current_striped = false;
  bool current_confirm = false;
  std::vector<std::uint8_t> chunks_in;
  // The peer has sent a message to be confirmed: its lanes leave from more
  // than one interface, and a lane of its that is lost is not the pair's end.
  bool peer_confirms = false;
  // Sending lanes lost, to open again (their numbers, and where they left
  // from), and the lanes lost and replaced: shut down, kept (a poller may
  // still hold a descriptor) and reported.
  std::vector<std::pair<int, std::string>> to_reopen;
  std::vector<std::unique_ptr<Lane>> retired_out;
  std::vector<std::unique_ptr<Lane>> retired_in;
  // A receive matched with a striped message half-way into the unexpected
  // queue: its bytes are handed over once the message is whole (they came
  // in any order).
  TcpRequestPtr striped_handover;

 private:
  static constexpr std::size_t kMaxPieces = 64;  // per write: what one sendmsg takes (IOV_MAX is more)
  using Pieces = std::array<iovec, kMaxPieces>;
  // The next pieces to send, headers and payloads of the queued sends in
  // order (building headers as it goes), up to `room` payload bytes:
  // `count` pieces of the returned bytes in all.
  std::size_t gather(Pieces& pieces, std::size_t room, std::size_t& count);
  // `written` more bytes of what gather() gave went out: completes the
  // sends that are whole.
  void advance(std::size_t written);
  // The sealed stream's flush() and receive() (sealed_stream.cpp).
  void flush_sealed(std::size_t budget);
  void receive_sealed();
  // The connection's own reading (receive() runs it, then what it wakes).
  void receive_connection();
  // Runs what a step of reading left to do: lanes waiting for the message
  // just begun, and the connection once a striped message is whole. Not
  // re-entered.
  void pump();
  bool kick_lanes_ = false;
  bool resume_connection_ = false;
  bool pumping_ = false;
  // Lanes: a sending lane takes the next chunk (false: none to take); a
  // striped send may be whole; a receiving lane's frame and chunk.
  bool take_chunk(Lane& lane);
  // Whether a sending lane with bytes queued should leave the next chunk
  // (of `n` bytes) to another that would deliver it well before it: then
  // it rests a moment (Lane::rest_until).
  bool lane_rests(Lane& lane, std::size_t n);
  double lane_rate(Lane& lane, std::chrono::steady_clock::time_point now);
  // A lane's chunk is all in its kernel: counted, and its send completed
  // once every chunk and the header are out.
  void chunk_sent(Lane& lane);
  // Takes a whole send out of the queue (wherever it is: a striped one
  // may finish after those behind it) and completes it.
  void complete_send(TcpRequest& r);
  // Striped sends with chunks no lane has taken yet.
  std::size_t undispensed_ = 0;
  // Lanes lost (lane_failover.cpp). Whether this rank's lanes to the peer
  // leave from more than one interface (its striped sends then ask to be
  // confirmed whole); drops a lost lane, its chunks to go again (true), or
  // false where the pair cannot go on without it.
  bool lanes_spread() const;
  bool lose_lane(const Lane& lane, const std::string& why);
  // Chunks of confirmed sends to go again (the request, the chunk's
  // index), taken before any new one.
  struct Redo {
    TcpRequest* request;
    std::size_t chunk;
  };
  std::vector<Redo> redo_;
  // Whether `lane` may take a chunk to go again: one of a message no
  // earlier than the last it took (a receiver would not read it past a
  // later one's, which waits for it); a lane opened again takes them first.
  bool redo_for(const Lane& lane) const;
  bool take_redo(Lane& lane);
  // A sending lane's TCP_NOTSENT_LOWAT (lanes.hpp, kLowWater).
  static void set_low_water(Lane& lane);
  // The chunk a lane takes: `r`'s chunk at `offset`.
  void give_chunk(Lane& lane, TcpRequest& r, std::size_t offset, std::size_t n);
  // The peer confirmed message `sequence` whole; a confirmed send
  // completes once no lane still writes a chunk of it.
  void whole_confirmed(std::uint64_t sequence);
  void complete_if_confirmed(TcpRequest& r);
  // Tells the peer that its message `sequence` came whole.
  void confirm_whole(std::uint64_t sequence);
  void receive_lane_clear(Lane& lane);
  void receive_lane_sealed(Lane& lane);
  void flush_lane_sealed(Lane& lane);
  // A lane's frame was read whole: it is current. frame_ready(): its
  // message is being read (and the frame fits it); false when the lane must
  // wait, or the pair failed.
  void new_frame(Lane& lane);
  bool frame_ready(Lane& lane);
  // Opens a sealed lane's whole records: false if it waits or failed.
  bool open_lane_records(Lane& lane);
  // `n` more bytes of the lane's chunk are in (at `target` + got or its
  // staging): hands a finished chunk over and counts it.
  void chunk_bytes(Lane& lane, std::size_t n);
  std::byte* chunk_target(Lane& lane);
  void fail_lanes();
  // A lane's send or receive failed with `error`: true to try again
  // (interrupted), else false, the pair failed unless the kernel only had
  // no room or no bytes (retry_after()'s rule, naming the lane).
  bool lane_retry_after(const Lane& lane, int error);
  void lane_closed(const Lane& lane);
  std::string lane_name(const Lane& lane, bool sending) const;
  // What a lane's failure adds to the pair's words: " (on lane N)".
  static std::string on_lane(const Lane& lane);
  // Opens the whole records read and parses their plaintext. False if the
  // stream paused or failed.
  bool open_records();
  // Consumes the staging buffer. False if the stream paused or failed.
  bool parse_staged();
  void begin_message();
  void finish_message();
  void account(std::size_t n);
  std::size_t current_remaining() const { return current.length - current_got; }
  // Where the payload being read may be read into directly: the posted
  // receive's buffer or the queued message's; null for a consuming receive
  // or a message being dropped.
  std::byte* current_target();
  // Hands `piece` (at `offset` of the payload) to a receive; false if it
  // failed doing so (a consumer that threw).
  bool deliver(TcpRequest& r, std::size_t offset, std::span<const std::byte> piece);
  std::string closed_reason() const;
  // After a send or receive that failed with `error`: true to try again
  // (interrupted); false to stop, the stream failed unless the kernel only
  // had no room or no bytes.
  bool retry_after(int error);
  // The reason for a failed send or receive, from its errno.
  std::string error_reason(int error) const;
};

}  // namespace collie::transport::tcp
