// The shared-memory backend's memory layout: what a mailbox holds and
// where, and how large its rings are. Every rank of a host computes the same
// layout, so a peer's mailbox is checked against it before it is used.
//
// A mailbox (one memfd per rank, mapped by its peers):
//
//   page 0            MailboxHeader: magic, group id, secret, owner, the bell
//   pages 1-17        BoardPage: the owner's entries of its groups' boards
//   then, per slot    one page of RingCursors, then the ring (ring_bytes)
//
// Slot s of rank r's mailbox is the ring that the host's s-th rank writes
// and r reads. A message in a ring is a 64-byte header (tag, sequence,
// length, fingerprint, kind, address) and its payload, padded to 64 bytes.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <sys/mman.h>
#include <unistd.h>

#include <collie/transport/board.hpp>

namespace collie::transport::shm {

inline constexpr std::uint64_t kMagic = 0x31766d6873696c63ULL;  // "clishmv1"
inline constexpr std::size_t kPage = 4096;
inline constexpr std::size_t kLine = 64;
inline constexpr std::size_t kHeaderBytes = 64;  // a message's header in the ring (48 used)
inline constexpr std::size_t kReadyFrom = 8;     // ranks on a host before the ready words
inline constexpr std::size_t kReadyWords = 32;   // 2,048 ranks
// Bytes a sender copies before it publishes them: the receiver copies out
// one piece while the sender copies in the next.
inline constexpr std::size_t kPiece = 32 * 1024;
// Each ring: a power of two, by how many ranks share the host
// (ring_bytes_for()). Where each rank has a core, both sides copy through a
// ring at once, and the larger it is, the less the two cores fight over its
// lines (4 MiB was no faster than 2). Where ranks outnumber the cores they
// take turns, and 1 MiB keeps less in the caches. A rank's rings from all
// its peers take at most kRingBudget (no smaller than kRingLeast). The
// measurements behind these sizes: docs/PERFORMANCE.md, "Shared memory".
inline constexpr std::size_t kRingMost = std::size_t{2} << 20;
inline constexpr std::size_t kRingCrowded = std::size_t{1} << 20;
inline constexpr std::size_t kRingLeast = std::size_t{256} << 10;
inline constexpr std::size_t kRingBudget = std::size_t{64} << 20;
// A message header's kind word.
inline constexpr std::uint64_t kInline = 0;  // the payload follows in the ring
inline constexpr std::uint64_t kRemote = 1;  // the payload is at `address` in the sender
// A payload of up to kTinyBytes rides in its header's line, at kTinyAt: a
// small collective's message is one line for the sender to write and the
// receiver to read, not two.
inline constexpr std::uint64_t kTiny = 2;
inline constexpr std::size_t kTinyBytes = 16;
inline constexpr std::size_t kTinyAt = 48;
// The ring bytes a message of `bytes` takes (its header, and its payload
// padded to lines unless it rides in the header).
inline constexpr std::size_t ring_bytes_of(std::size_t bytes) {
  return kHeaderBytes + (bytes <= kTinyBytes ? 0 : (bytes + kLine - 1) / kLine * kLine);
}

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
  // On a host of more than kReadyFrom ranks: bit s of word s / 64 is set by
  // the sender in slot s after it moved its ring's write cursor, and the
  // owner reads (and clears) these words instead of every ring's cursor
  // (hundreds of lines a turn, at hundreds of ranks). Up to kReadyWords * 64
  // ranks; past that the owner reads every cursor.
  alignas(kLine) std::atomic<std::uint64_t> ready[kReadyWords];
  // 1 + the processor the owner last waited on, in a board call (board.cpp)
  // or on a busy machine (progress.cpp; 0: not known): a rank that waits on
  // the same one sleeps instead of spinning.
  alignas(kLine) std::atomic<std::uint32_t> cpu;
};
static_assert(sizeof(MailboxHeader) <= kPage);

// A group's board (board.hpp): for each of Board::kSpaces groups (by tag
// space), two entries the owner writes in turn, one per small call. An
// entry's first line holds its header and the first 40 bytes of its
// payload: an 8 B call is one line to write and one to read.
inline constexpr std::size_t kBoardPayload = 4096 + 40;
struct BoardEntry {
  std::atomic<std::uint64_t> ticket;       // 1 + the call's ticket; 0: none yet
  std::atomic<std::uint64_t> fingerprint;  // the call, as the runtime encodes it
  std::atomic<std::uint64_t> sequence;     // its number among the group's calls
  std::byte payload[kBoardPayload];
};
static_assert(sizeof(BoardEntry) % kLine == 0);
struct BoardPage {
  alignas(kLine) BoardEntry entries[Board::kSpaces][2];
};

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
  // Written by the sender: for a message it withdrew half-way (its send
  // timed out or its collective was abandoned), 1 + its sequence number in
  // entry seq % kWithdrawSlots. The rest of that message is filler; the
  // receiver drops it, and the pair goes on. An entry is reused only once
  // the receiver has read past the message it names, so up to
  // kWithdrawSlots withdrawn messages may wait unread (a receiver busy
  // elsewhere while one collective after another is abandoned).
  static constexpr std::size_t kWithdrawSlots = 32;
  alignas(kLine) std::atomic<std::uint64_t> withdrawn[kWithdrawSlots];

  std::atomic<std::uint64_t>& withdrawn_of(std::uint64_t seq) {
    return withdrawn[seq % kWithdrawSlots];
  }
};
static_assert(sizeof(RingCursors) <= kPage);

// Every rank of the host computes the same figure (the mailboxes of a host
// are alike): from how many ranks it has and how many processors its kernel
// has online, not from this process's own CPU affinity.
inline std::size_t ring_bytes_for(std::size_t ranks_here) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::size_t ring =
      cpus > 0 && ranks_here > static_cast<std::size_t>(cpus) ? kRingCrowded : kRingMost;
  while (ring > kRingLeast && ring * (std::max<std::size_t>(ranks_here, 2) - 1) > kRingBudget)
    ring /= 2;
  return ring;
}

inline std::size_t slot_bytes(std::size_t ring) {
  return kPage + ring;
}
// After the header page and the board's pages.
inline constexpr std::size_t kRingsAt = kPage + (sizeof(BoardPage) + kPage - 1) / kPage * kPage;
inline std::size_t mailbox_bytes(std::size_t slots, std::size_t ring) {
  return kRingsAt + slots * slot_bytes(ring);
}
inline std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

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
  BoardPage& board() const { return *reinterpret_cast<BoardPage*>(base + kPage); }
  RingCursors& cursors(std::size_t slot) const {
    return *reinterpret_cast<RingCursors*>(base + kRingsAt +
                                           slot * slot_bytes(header().ring_bytes));
  }
  std::byte* ring(std::size_t slot) const {
    return base + kRingsAt + slot * slot_bytes(header().ring_bytes) + kPage;
  }
};

}  // namespace collie::transport::shm
