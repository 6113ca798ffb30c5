// Schedules: an algorithm, written once, for two readers.
//
// A Schedule is what one rank does in one collective: an ordered list of
// steps; in each step it sends some ranges of its buffer to some peers and
// receives some ranges from others, combining what arrives into the buffer
// by copy or by reduction. Schedules are pure functions of (rank, world
// size, element count, root): the runtime executes them over the transport,
// and `collie explain` runs them symbolically (simulate() below) to show
// which contributions each rank holds after each step.
//
// Rules every schedule keeps (simulate() checks them):
// - Between two ranks, the k-th send of one matches the k-th receive of the
//   other, and they name the same number of elements.
// - A step first makes its local copies (in order), then sends; sends read
//   the buffer as it was after the copies, even where a receive of the same
//   step lands on the same range (recursive doubling exchanges whole
//   buffers: the runtime then sends from a snapshot; elsewhere it sends
//   straight from the caller's memory). No two receives of a step overlap.
// - Empty ranges are left out on both sides.
#pragma once

#include <algorithm>
#include <cstddef>
#include <deque>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace collie::collectives {

// Elements [offset, offset + count) of a rank's buffer.
struct Range {
  std::size_t offset = 0;
  std::size_t count = 0;
  friend bool operator==(const Range&, const Range&) = default;
};

enum class Combine : std::uint8_t {
  Copy,    // the received elements replace the range
  Reduce,  // range = op(range, received)
};

struct Transfer {
  int peer = 0;
  Range range;
  Combine combine = Combine::Copy;  // receives only
};

// Elements copied within the rank's own buffer (say, its input block into
// its slot of the output).
struct LocalCopy {
  Range from;
  Range to;
};

struct Step {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  std::vector<LocalCopy> copies;  // made before the sends
};

struct Schedule {
  std::size_t buffer_count = 0;  // elements in this rank's working buffer (past the layout: scratch)
  std::vector<Step> steps;
};

class Hosts;  // hosts.hpp

// What a schedule is made for: this rank, the world size, the element count
// (per rank, as the collective's caller counts it: see algorithms.hpp), the
// root of rooted collectives, the number of pipeline pieces for the chain
// algorithms (the runtime derives it from the segment size), and which
// host each rank is on (null: not known; each rank counts as a host of its
// own).
struct Shape {
  int rank = 0;
  int world = 1;
  std::size_t count = 0;
  int root = 0;
  int pieces = 1;
  std::shared_ptr<const Hosts> hosts = nullptr;
};

// The order rings and chains take through the ranks: by host, then by rank
// (Hosts::ring_order()), or rank order when the hosts are not known.
std::vector<int> ring_order(const Shape& shape);
// Throws collie::Error when the shape's hosts name another number of ranks
// than its world.
void check_hosts(const Shape& shape);

// Helpers for writing schedules: steps with nothing in them, and transfers
// of empty ranges, are left out (on both sides alike, since both sides
// compute the same ranges).
void add_send(Step& step, int peer, Range range);
void add_recv(Step& step, int peer, Range range, Combine combine);
void add_copy(Step& step, Range from, Range to);
void push_step(Schedule& s, Step step);
// ((i % n) + n) % n
int wrap(int i, int n);

// Whether a step's receive lands on a range one of its sends reads.
bool receives_overlap_sends(const Step& step);
bool overlap(const Range& a, const Range& b);

// Chunk i of `count` elements cut into `parts` nearly equal, contiguous
// chunks (the first count % parts chunks one element longer).
Range chunk(std::size_t count, int parts, int i);
// Rank i's block of a buffer of rank-sized blocks of `count` (reduce_scatter's
// input, all_gather's output): [i * count, (i + 1) * count).
Range block(std::size_t count, int i);

// ---- running schedules without sockets ----

// Runs every rank's schedule in an order the messages allow: a rank posts a
// step's sends (`send(rank, step)` returns one Message per send, in order)
// and completes the step once every message it receives has been sent
// (`receive(rank, step, messages)` gets one per receive, in order). Between
// two ranks the k-th message sent is the k-th received. Throws
// collie::Error, starting with `who`, on a deadlock or messages left
// unreceived. simulate() and the cost model (cost.hpp) are both this loop.
template <class Message, class Send, class Receive>
void run_schedules(const std::vector<Schedule>& schedules, const char* who, Send send,
                   Receive receive);

// ---- symbolic execution ----

// What one element holds: the ranks whose contributions were combined into
// it, with repetition, sorted (a reduction that counts a rank twice shows).
using Contribution = std::vector<int>;
// [rank][element]
using SymbolicBuffers = std::vector<std::vector<Contribution>>;

// Checks the rules above without running anything but message sizes:
// peers, ranges within the buffer, local copies, overlapping receives, and
// that the messages match in order without a deadlock. Throws collie::Error
// naming the rank and step.
void validate(const std::vector<Schedule>& schedules);

// Runs every rank's schedule (schedules[r] is rank r's) on symbolic
// buffers, matching messages between ranks in order. A buffer shorter
// than its schedule's is extended with empty elements: the schedule's own
// scratch past the collective's layout (two_level all_to_all's). Throws collie::Error
// with a description on a deadlock, a size mismatch, a range outside the
// buffer, overlapping receives within a step, or messages left unreceived.
SymbolicBuffers simulate(const std::vector<Schedule>& schedules, SymbolicBuffers initial);

// The state every rank starts an all_reduce-like collective with: element
// i of rank r holds {r}.
SymbolicBuffers own_contributions(int world, std::size_t count);

// Throws the Error run_schedules() reports (out of line: fmt stays out of
// this header).
[[noreturn]] void throw_deadlock(const char* who, const std::vector<Schedule>& schedules,
                                 const std::vector<std::size_t>& next);
[[noreturn]] void throw_unreceived(const char* who, std::size_t from, std::size_t to,
                                   std::size_t count);

// The messages in flight between the ranks of n, in order per pair: only
// the pairs that talk have a queue (a ring of n ranks uses n of the n^2).
template <class Message>
class PairQueues {
 public:
  explicit PairQueues(std::size_t n) : n_(n) {}
  std::deque<Message>& of(std::size_t from, std::size_t to) { return queues_[from * n_ + to]; }
  std::size_t waiting(std::size_t from, std::size_t to) const {
    const auto it = queues_.find(from * n_ + to);
    return it == queues_.end() ? 0 : it->second.size();
  }
  Message pop(std::size_t from, std::size_t to) {
    const auto it = queues_.find(from * n_ + to);
    Message m = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) queues_.erase(it);
    return m;
  }
  // Calls f(from, to, count) for a pair with messages left, if any.
  template <class F>
  void leftover(F f) const {
    for (const auto& [key, q] : queues_)
      if (!q.empty()) return f(key / n_, key % n_, q.size());
  }

 private:
  std::size_t n_;
  std::unordered_map<std::size_t, std::deque<Message>> queues_;
};

// Whether rank `r` can complete `step`: as many messages wait from each
// peer as the step receives from it.
template <class Message>
bool receivable(const Step& step, const PairQueues<Message>& queues, std::size_t r) {
  for (const auto& t : step.recvs) {
    const auto needed = static_cast<std::size_t>(
        std::count_if(step.recvs.begin(), step.recvs.end(),
                      [&](const Transfer& u) { return u.peer == t.peer; }));
    if (queues.waiting(static_cast<std::size_t>(t.peer), r) < needed) return false;
  }
  return true;
}

template <class Message, class Send, class Receive>
void run_schedules(const std::vector<Schedule>& schedules, const char* who, Send send,
                   Receive receive) {
  const std::size_t n = schedules.size();
  PairQueues<Message> queues(n);
  std::vector<std::size_t> next(n, 0);             // the step each rank is at
  std::vector<bool> sent(n, false);                // that step's sends posted?
  // A rank that could not receive is looked at again only once a message
  // has come for it since (the order the ranks go in stays the sweep's).
  std::vector<bool> stuck(n, false);
  std::vector<Message> received;  // a step's messages, handed to `receive`
  for (;;) {
    bool progress = false;
    bool all_done = true;
    for (std::size_t r = 0; r < n; ++r) {
      const auto& steps = schedules[r].steps;
      if (next[r] == steps.size()) continue;
      all_done = false;
      if (stuck[r]) continue;
      const auto& step = steps[next[r]];
      if (!sent[r]) {
        auto&& messages = send(r, next[r]);
        for (std::size_t i = 0; i < step.sends.size(); ++i) {
          const auto to = static_cast<std::size_t>(step.sends[i].peer);
          queues.of(r, to).push_back(std::move(messages[i]));
          stuck[to] = false;
        }
        sent[r] = true;
        progress = true;
      }
      if (!receivable(step, queues, r)) {
        stuck[r] = true;
        continue;
      }
      received.clear();
      for (const auto& t : step.recvs)
        received.push_back(queues.pop(static_cast<std::size_t>(t.peer), r));
      receive(r, next[r], received);
      ++next[r];
      sent[r] = false;
      progress = true;
    }
    if (all_done) break;
    if (!progress) throw_deadlock(who, schedules, next);
  }
  queues.leftover([&](std::size_t from, std::size_t to, std::size_t count) {
    throw_unreceived(who, from, to, count);
  });
}

}  // namespace collie::collectives
