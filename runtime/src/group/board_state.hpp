// A group's board for small calls between ranks of one host
// (executor/board_call.hpp runs them): part of detail::Group.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include <collie/transport/board.hpp>

namespace collie {

struct BoardState {
  // Small calls on a board (board_call.hpp): whether the members can
  // (alike on each), the board (opened at the first), the tickets handed
  // out (start()) and those this rank has run, in order (the rest wait on
  // board_cv).
  bool board_possible = false;
  std::mutex board_open_mu;  // (not std::call_once: opening may throw, and
                             // libstdc++'s call_once then hangs the next caller)
  std::atomic<bool> board_open{false};
  std::atomic<bool> board_unreachable{false};  // a diagnosis could not open it
  std::unique_ptr<transport::Board> board;     // set once, under board_open_mu
  std::atomic<std::uint64_t> board_tickets{0};
  std::atomic<std::uint64_t> board_done{0};
  std::atomic<int> board_waiting{0};
  std::mutex board_mu;
  std::condition_variable board_cv;
};

}  // namespace collie
