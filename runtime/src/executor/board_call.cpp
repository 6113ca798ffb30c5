// Small calls on the group's board (board_call.hpp).
#include "executor/board_call.hpp"

#include <array>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include <collie/coarse_clock.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>

#include "executor/diagnosis.hpp"
#include "watch/stall.hpp"
#include "group/tags.hpp"

namespace collie {

bool board_possible(const detail::Group& g) {
  const auto n = g.members.size();
  if (g.rank < 0 || n < 2 || n > transport::Board::kMostMembers ||
      g.slot >= transport::Board::kSpaces)
    return false;
  for (int m : g.members)
    if (m != g.world->config.rank && !g.transport().shares_memory_with(m)) return false;
  return true;
}

bool board_takes(const detail::Group& g, Collective c, DataType dtype, std::size_t count) {
  if (!g.board_possible) return false;
  if (c == Collective::Barrier) return true;
  return c == Collective::AllReduce && count > 0 &&
         count * dtype_size(dtype) <= transport::Board::kBytes;
}

bool goes_on_board(const detail::Group& g, const Call& call, bool chosen_by_auto) {
  return chosen_by_auto && board_takes(g, call.collective, call.dtype, call.count) &&
         call.staging.engine == nullptr && !call.staging.in_chunks();
}

namespace {

// A schedule that names every other member, for the notices a failed call
// sends them (Diagnosis::tell_peers()).
collectives::Schedule everyone(const detail::Group& g) {
  collectives::Schedule s;
  auto& step = s.steps.emplace_back();
  for (int i = 0; i < static_cast<int>(g.members.size()); ++i)
    if (i != g.rank) step.sends.push_back(collectives::Transfer{i, {}, {}});
  return s;
}

// The group's board, opened at its first use.
void open_board(detail::Group& g) {
  if (g.board_open.load(std::memory_order_acquire)) return;
  std::lock_guard lock(g.board_open_mu);
  if (g.board) return;
  auto board = g.transport().open_board(g.members, g.slot);
  if (!board)
    throw Error(fmt::format("rank {}: {}: its transport has no board for its members, "
                            "though they all share this host's memory",
                            g.rank, g.name));
  g.board = std::move(board);
  g.board_open.store(true, std::memory_order_release);
}

// Waits until this rank's board calls before `ticket` have run.
void wait_turn(detail::Group& g, const Call& call, std::uint64_t ticket) {
  const auto deadline = std::chrono::steady_clock::now() + call.timeout;
  ++g.board_waiting;
  struct Leave {
    std::atomic<int>& w;
    ~Leave() { --w; }
  } leave{g.board_waiting};
  std::unique_lock lock(g.board_mu);
  if (!g.board_cv.wait_until(lock, deadline,
                             [&] { return g.board_done.load() == ticket; }))
    throw TimeoutError(fmt::format(
        "rank {}: {} #{} on {}: timed out after {} waiting for this rank's earlier small calls "
        "of the group (on its board, in the order they started; {} of them have run) to finish",
        g.rank, describe(call.signature(), false), call.sequence, g.name,
        describe_duration(call.timeout), g.board_done.load()));
}

}  // namespace

std::optional<std::uint64_t> board_call_of(detail::Group& g, int member, std::uint64_t sequence) {
  if (!g.board_possible || member == g.rank ||
      g.board_unreachable.load(std::memory_order_relaxed))
    return std::nullopt;
  try {
    open_board(g);
  } catch (const std::exception&) {
    // (The call's own wait names what is wrong; no second try from here.)
    g.board_unreachable.store(true, std::memory_order_relaxed);
    return std::nullopt;
  }
  return g.board->posted(static_cast<std::size_t>(member), sequence);
}

void run_on_board(detail::Group& g, const Call& call) {
  const auto ticket = static_cast<std::uint64_t>(call.board);
  if (g.board_done.load(std::memory_order_acquire) != ticket) wait_turn(g, call, ticket);
  // The next ticket's turn, however this one ends (a failed one breaks the
  // group: the calls after it fail at once).
  struct Next {
    detail::Group& g;
    std::uint64_t ticket;
    ~Next() {
      // Sequentially consistent, as board_waiting's increment and load: a
      // waiter counted after this load sees the new value (no lost wake-up).
      g.board_done.store(ticket + 1);
      if (g.board_waiting.load() > 0) {
        std::lock_guard lock(g.board_mu);
        g.board_cv.notify_all();
      }
    }
  } next{g, ticket};

  const std::size_t es = dtype_size(call.dtype);
  const std::size_t bytes = call.collective == Collective::AllReduce ? call.count * es : 0;
  const int n = static_cast<int>(g.members.size());
  // What this rank posts: its input as it is, or scaled first for Avg (a
  // copy: the input stays the caller's).
  std::array<std::byte, transport::Board::kBytes> scaled;
  std::span<const std::byte> mine(static_cast<const std::byte*>(call.input), bytes);
  if (bytes > 0 && call.op == ReduceOp::Avg) {
    std::memcpy(scaled.data(), call.input, bytes);
    prescale_average(call.dtype, scaled.data(), call.count, n);
    mine = std::span<const std::byte>(scaled.data(), bytes);
  }
  const auto print = fingerprint(call.signature());
  // Built only if the wait takes long or fails: the stall inspector, and
  // what it reads in the messages queued under this call's tag (a member
  // that called something else and sent its first message).
  std::optional<StallCheck> stall;
  std::optional<Diagnosis> diagnosis;
  // (The coarse clock: read at every call, and only for the diagnosis.)
  const auto began = CoarseClock::now();
  const auto diagnose = [&]() -> Diagnosis& {
    if (!diagnosis) {
      stall.emplace(g, call, began);
      diagnosis.emplace(g, call, collective_tag(g.slot, call.sequence), print, *stall);
    }
    return *diagnosis;
  };
  const auto look = [&] {
    auto& d = diagnose();
    stall->poll();
    if (g.transport().any_queued()) d.check_queued();
  };
  try {
    open_board(g);
    g.board->exchange(ticket, call.sequence, print, mine, call.timeout,
                       transport::BoardLook(look));
    for (int i = 0; i < n; ++i) {
      const auto theirs = g.board->fingerprint(static_cast<std::size_t>(i));
      if (theirs == print) continue;
      // (Every member reads every entry: each finds the mismatch itself.)
      diagnose().found(i, theirs, print);
      throw MismatchError(diagnosis->mismatch(i, theirs));
    }
  } catch (const MismatchError& e) {
    // Found in a message another call sent: said as a call by messages
    // says it (executor.cpp, docs/failures.md).
    auto& d = diagnose();
    if (d.mismatched_from >= 0 && !d.second_hand) {
      d.save_mismatch(e.what());
      d.tell_mismatch(everyone(g));
    }
    throw;
  } catch (const ConnectionError& e) {
    auto& d = diagnose();
    for (int i = 0; i < n && d.failed_world_rank < 0; ++i) {
      const int m = g.members[static_cast<std::size_t>(i)];
      if (i == g.rank || g.transport().failure_of(m).empty()) continue;
      // What it said before it left (a mismatch it found, a notice) is
      // the news: thrown from here if there is any.
      d.explain_lost_connection(i);
      d.failed_world_rank = m;
    }
    d.blame(e.what());
    d.tell_peers(everyone(g));
    throw;
  } catch (const InterruptedError&) {
    auto& d = diagnose();
    d.failed_world_rank = g.members[static_cast<std::size_t>(g.rank)];
    d.failed_reason = FailureReason::Interrupted;
    d.tell_peers(everyone(g));
    throw;
  } catch (const TimeoutError& e) {
    auto& d = diagnose();
    stall->final_poll();
    const bool own = d.failed_world_rank < 0;
    if (own) {
      d.failed_world_rank = stall->culprit() >= 0 ? stall->culprit()
                                                  : g.members[static_cast<std::size_t>(g.rank)];
      d.failed_reason = FailureReason::TimedOut;
    }
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
        CoarseClock::now() - began);
    const std::string message = call_timeout_text(e.what(), waited, call.timeout, stall->report());
    d.blame(message);
    if (own) d.save_stall_report();
    d.tell_peers(everyone(g), true);
    throw TimeoutError(message);
  }
  if (bytes == 0) return;
  // Every rank the same sum, in rank order.
  auto* out = static_cast<std::byte*>(call.output);
  std::memcpy(out, g.board->entry(0), bytes);
  for (int i = 1; i < n; ++i)
    reduce(call.dtype, call.op, out, g.board->entry(static_cast<std::size_t>(i)), call.count);
  if (call.op == ReduceOp::Avg) finish_average(call.dtype, out, call.count, n);
}

}  // namespace collie
