// The plans of a group's recent calls, kept for the next call of the same
// shape: a training loop calls the same few collectives on the same sizes
// over and over, and a plan is a pure function of the call's shape
// (collective, algorithm, count, element size, root, pipeline pieces; the
// group's ranks, hosts and segment size are fixed). A plan is the schedule
// and its dataflow graph as built (executor/flow_graph.hpp; a call on host
// memory runs it, one staged by segments runs step by step). Kept: the 16 most recently used shapes, each of
// at most kMaxSteps steps and kMaxOps ops (a larger one moves so much data
// that making it again costs nothing in comparison). A hit costs a lock and
// a reference count: no allocation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <collie/collectives/algorithms.hpp>
#include <collie/collectives/schedule.hpp>

#include "plan/flow_graph.hpp"

namespace collie {

// A piece of an input that the schedule reads more of than it writes
// (reduce_scatter's): where buffer_layout.hpp maps it.
struct InputPiece {
  enum class Kind : std::uint8_t {
    Caller,   // never written: read in the caller's input
    Scratch,  // written: a working copy of the piece
    Output,   // the output's range: the caller's output, filled from the input
  };
  collectives::Range range;
  Kind kind = Kind::Caller;
};

struct Plan {
  collectives::Schedule schedule;
  // The whole schedule as one dataflow, as build() left it (copied by each
  // run that uses it).
  flow::Graph flow;
  // Where the output lies inside the input: the input in pieces, in order,
  // when every range the schedule reads lies in one piece; empty: the
  // whole input is copied (buffer_layout.hpp).
  std::vector<InputPiece> input_pieces;
};

class PlanCache {
 public:
  struct Key {
    collectives::Collective collective{};
    collectives::Algorithm algorithm{};
    std::size_t count = 0;
    std::size_t element_bytes = 0;
    int root = 0;
    int pieces = 1;
    bool operator==(const Key&) const = default;
  };
  static constexpr std::size_t kEntries = 16;
  static constexpr std::size_t kMaxSteps = 4096;
  static constexpr std::size_t kMaxOps = 65536;

  // The plan for `key`: kept, or made by make() (and kept if small).
  template <class Make>
  std::shared_ptr<const Plan> get(const Key& key, Make&& make) {
    {
      std::lock_guard lock(mu_);
      ++clock_;
      for (auto& e : entries_) {
        if (e.plan && e.key == key) {
          e.used = clock_;
          return e.plan;
        }
      }
    }
    std::shared_ptr<const Plan> made = make();
    if (made->schedule.steps.size() > kMaxSteps || made->flow.ops.size() > kMaxOps) return made;
    std::lock_guard lock(mu_);
    Entry* oldest = &entries_[0];
    for (auto& e : entries_) {
      if (e.plan && e.key == key) return e.plan;  // another thread made it too
      if (e.used < oldest->used) oldest = &e;
    }
    *oldest = Entry{key, made, ++clock_};
    return made;
  }

 private:
  struct Entry {
    Key key;
    std::shared_ptr<const Plan> plan;  // null: empty
    std::uint64_t used = 0;
  };
  std::mutex mu_;
  std::uint64_t clock_ = 0;
  std::array<Entry, kEntries> entries_{};
};

}  // namespace collie
