// What a ProcessGroup handle points to (private to the runtime): the job
// every group of a process shares (World), and one group (detail::Group).
// The room every other room of runtime/src reads: it includes none of them
// but device/ and plan/ (docs/design.md, "The rooms").
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <collie/async_runner.hpp>
#include <collie/collectives/cost.hpp>
#include <collie/collectives/hosts.hpp>
#include <collie/job_config.hpp>
#include <collie/process_group.hpp>
#include <collie/transport/transport.hpp>

#include "device/device.hpp"
#include "group/auto_choices.hpp"
#include "group/board_state.hpp"
#include "group/broken_state.hpp"
#include "group/host_link.hpp"
#include "group/job_store.hpp"
#include "group/progress.hpp"
#include "plan/plan_cache.hpp"

namespace collie {

// Held by pointer, made and used in the rooms above this one.
class StallResponder;  // watch/stall.hpp
class Tracer;          // watch/trace.hpp

// The job: shared by the world group and every sub-group made from it.
struct World {
  std::unique_ptr<Tracer> tracer;  // null unless tracing; closed last
  JobConfig config;
  std::unique_ptr<JobStore> job;
  // The run's namespace (JobStore::run_store), where newcomers wait and
  // expand() admits them: the first world's, kept by the worlds expand()
  // makes after it.
  std::shared_ptr<store::Store> run_store;
  // The random id rank 0 chose for this world (keys::kGroupId).
  std::uint64_t group_id = 0;
  // Declared after the store, so destroyed before it: connections close
  // before the store (which rank 0 may host) goes away.
  std::shared_ptr<transport::Transport> transport;
  std::string advertised_host;  // where peers reach this rank
  // Rank 0's machine: how many of the job's ranks run there, on how many
  // cores (placement.hpp; CostModel::crowding).
  int host_ranks = 1;
  int host_cores = 1;
  // [world rank] its host (init.cpp); null when not known (one rank, or
  // more than init reads).
  std::shared_ptr<const collectives::Hosts> hosts;
  // The link between hosts Auto prices with (link_probe.hpp): measured at
  // init where the world spans hosts, unless COLLIE_HOST_LINK says it.
  HostLink host_link;
  // This rank's groups, by slot, for the stall responder (a group adds
  // itself when made and leaves when destroyed).
  std::mutex groups_mu;
  std::map<std::uint32_t, detail::Group*> groups;
  // The highest tag space (slot) this rank's groups have used, and the lock
  // that makes one new group at a time (new_group, process_group.cpp).
  std::mutex new_group_mu;
  std::int64_t highest_slot = 0;
  // Answers other ranks' stall queries; null with file:// or no stall time.
  // Last: stopped first.
  std::unique_ptr<StallResponder> responder;
};

// The parts each room keeps in it are their own (auto_choices.hpp,
// board_state.hpp, broken_state.hpp), named by their fields here.
struct detail::Group : AutoChoices, BoardState, BrokenState {
  std::shared_ptr<World> world;
  std::string name;               // "world", "group 1 [0, 2]"
  std::vector<int> members;       // group rank -> world rank
  int rank = -1;                  // this process's group rank; -1: not a member
  std::uint32_t slot = 0;         // tag space: 0 for the world
  std::uint32_t trace_group = 0;  // the tracer's number for `name` (when tracing)
  std::atomic<std::uint64_t> sequence{0};
  std::atomic<std::uint32_t> children{0};
  collectives::CostModel cost_model;
  // [group rank] its host, for the schedules; null when not known.
  std::shared_ptr<const collectives::Hosts> hosts;
  // The schedules of recent calls, for the next call of the same shape.
  PlanCache plans;
  // shrink() (shrink.cpp) and expand() (expand.cpp): one at a time; the
  // group shrink made, which a second call returns; how many expand()s
  // this group has run (each has its decision key).
  std::mutex shrink_mu;
  std::shared_ptr<detail::Group> shrunk;
  std::uint64_t expansions = 0;
  // The group ranks that joined at the expand() that made this group.
  std::vector<int> newcomers;
  // CUDA streams and pinned blocks, kept between calls on device buffers.
  std::shared_ptr<device::EnginePool> engines = std::make_shared<device::EnginePool>();
  // Where this rank is in the group's calls (stall.hpp).
  Progress progress;
  // Its async calls, COLLIE_ASYNC_CALLS at once (JobConfig::async_calls),
  // each queue starting its calls in call order. With 1, every call waits
  // for the one before it. With more, calls whose largest buffer is at most
  // kSmallCall (latency-bound: a DDP bucket of a few layers, a barrier, a
  // board call) have a queue of their own, one at a time, so that none
  // waits behind a large one; the larger take the other places. A call's
  // queue is decided by its size alone, alike on every rank, and each
  // queue starts in call order: the oldest call of each runs everywhere,
  // so no rank waits for a call another has not started. (Last: stopped,
  // and joined, first.)
  static constexpr std::size_t kSmallCall = std::size_t{64} << 10;
  AsyncRunner small_runner;
  AsyncRunner runner;  // every async call where COLLIE_ASYNC_CALLS is 1

  explicit Group(int async_calls = 1)
      : small_runner({}, 1), runner({}, async_calls > 1 ? async_calls - 1 : 1),
        small_queue_(async_calls > 1) {}
  ~Group();
  // The runner of an async call whose largest buffer holds `bytes`.
  AsyncRunner& runner_for(std::size_t bytes) {
    return small_queue_ && bytes <= kSmallCall ? small_runner : runner;
  }  // leaves its world's list
  transport::Transport& transport() const { return *world->transport; }
  void require_member(std::string_view what) const;

 private:
  bool small_queue_;
};

}  // namespace collie
