// Small calls on the group's board (transport/board.hpp): where every
// member of a group shares this host's memory, an all_reduce of up to
// Board::kBytes a rank and a barrier whose algorithm Auto chooses take no
// schedule and no message. Each rank writes its vector once and reads every
// other member's; each reduces them all in rank order, so every rank gets
// the same bits. A forced algorithm (COLLIE_ALGO, CollectiveOptions) runs
// its schedule as always.
//
// A group's board calls take tickets in the order they start (start()),
// alike on every member, and each rank runs them in that order: a call
// whose turn has not come (an async call still queued ahead of it) waits.
#pragma once

#include <cstdint>
#include <optional>

#include "group/call.hpp"
#include "group/group.hpp"

namespace collie {

// Whether the group's members can take its small calls on a board: at most
// Board::kMostMembers, in one of the first Board::kSpaces tag spaces, and
// every other member reached through shared memory. The same on every
// member; decided when the group is made.
bool board_possible(const detail::Group& g);

// Whether a call of this shape on host memory, its algorithm Auto's to
// choose, goes on the group's board.
bool board_takes(const detail::Group& g, Collective c, DataType dtype, std::size_t count);

// Whether `call`, whose algorithm Auto chose (`chosen_by_auto`), goes on the
// board.
bool goes_on_board(const detail::Group& g, const Call& call, bool chosen_by_auto);

// The fingerprint group rank `member` wrote on the group's board for call
// #`sequence`, if it is there now (a member that called something else,
// seen by one that waits for its messages); nullopt also where the group
// has no board or it cannot be opened.
std::optional<std::uint64_t> board_call_of(detail::Group& g, int member, std::uint64_t sequence);

// Runs `call` (its ticket in call.board) on the board. Throws what
// Board::exchange() throws, and MismatchError when a member's call differs.
void run_on_board(detail::Group& g, const Call& call);

}  // namespace collie
