// A group's board: how the ranks of a group that share one host's memory
// carry a small collective without messages. Each member writes its call's
// bytes once, into an entry of its own mailbox, and reads every other
// member's entry where it lies: one line written and n - 1 read for a call
// of up to 40 bytes, and no request, queue or lock on the way.
//
//   auto board = transport.open_board(members, space);  // null: no board here
//   board->exchange(ticket, sequence, fingerprint, mine, timeout, look);
//   for (std::size_t i = 0; i < members.size(); ++i) use(board->entry(i));
//
// Tickets. A group numbers its board calls 0, 1, 2, ... alike on every
// member, and each member exchanges them in that order, one at a time. A
// member writes the entry of ticket t where it wrote t - 2 (two entries a
// member), which no member reads any more: every member has finished t - 1
// before this one could finish it (it read their entries of t - 1), so
// every member has read t - 2. What exchange() leaves readable in
// entry() stays so until this member's next exchange.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace collie::transport {

// What Board::exchange() runs now and then while it waits: a reference to
// the caller's callable, which outlives the call (nothing allocated).
class BoardLook {
 public:
  template <class F>
  explicit BoardLook(const F& f)
      : target_(&f), call_([](const void* t) { (*static_cast<const F*>(t))(); }) {}
  void operator()() const { call_(target_); }

 private:
  const void* target_;
  void (*call_)(const void*);
};

class Board {
 public:
  // The most bytes a member's entry holds, the most members a board
  // serves (each member reads every other's entry: past a few, a tree of
  // messages reads fewer lines), and the tag spaces that have one (the
  // world's and the first sub-groups').
  static constexpr std::size_t kBytes = 4096;
  static constexpr std::size_t kMostMembers = 8;
  static constexpr std::uint32_t kSpaces = 8;

  virtual ~Board() = default;

  // Writes `mine` (at most kBytes) with `fingerprint` and the call's
  // `sequence` (its number among all the group's calls) as this member's
  // entry for `ticket`, then waits until every member has written its own
  // for `ticket`, spinning and sleeping as the backend's waits do. `look`
  // runs now and then while it waits (every few milliseconds once it
  // sleeps): the caller's chance to find a reason to stop, by throwing.
  // Throws ConnectionError when a member's process ended or it closed its
  // transport, naming it; TimeoutError past `timeout`, naming the members
  // whose entries are missing; InterruptedError when waits are
  // interrupted (interrupt.hpp). A wait that throws withdraws this
  // member's entry: a member that comes later waits for it, as it would
  // for a message never sent.
  virtual void exchange(std::uint64_t ticket, std::uint64_t sequence, std::uint64_t fingerprint,
                        std::span<const std::byte> mine, std::chrono::milliseconds timeout,
                        BoardLook look) = 0;
  // Member `index`'s bytes (in the order of the members the board was
  // opened with) and its fingerprint, as the last exchange found them.
  virtual const std::byte* entry(std::size_t index) const = 0;
  virtual std::uint64_t fingerprint(std::size_t index) const = 0;
  // The fingerprint member `index` wrote for the group's call #`sequence`,
  // if its entries hold that call now: a member that waits for messages
  // of that call from `index` learns that it called something else.
  virtual std::optional<std::uint64_t> posted(std::size_t index,
                                              std::uint64_t sequence) const = 0;
};

}  // namespace collie::transport
