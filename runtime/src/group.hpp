// What a ProcessGroup handle points to (private to the runtime): the job
// every group of a process shares (World), and one group (detail::Group).
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <collie/collectives/cost.hpp>
#include <collie/collectives/hosts.hpp>
#include "bootstrap/job_store.hpp"
#include <collie/process_group.hpp>
#include <collie/transport/transport.hpp>

#include "device/device.hpp"
#include "bootstrap/link_probe.hpp"
#include "executor/plan_cache.hpp"
#include "watch/stall.hpp"
#include "watch/trace.hpp"
#include "work.hpp"

namespace collie {

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

struct detail::Group {
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
  // Auto's choices, by (collective, dtype size, log2 bytes, root).
  mutable std::mutex choice_mu;
  mutable std::map<std::uint64_t, Algorithm> choices;
  // The last choice, read without the lock: key << 8 | algorithm (0: none).
  mutable std::atomic<std::uint64_t> last_choice{0};
  // The collectives (bit Collective) whose selection map was logged.
  mutable std::atomic<std::uint32_t> maps_shown{0};
  // The schedules of recent calls, for the next call of the same shape.
  PlanCache plans;
  // Small calls on a board (board_call.hpp): whether the members can
  // (alike on each), the board (opened at the first), the tickets handed
  // out (start()) and those this rank has run, in order (the rest wait on
  // board_cv).
  bool board_possible = false;
  std::mutex board_open_mu;  // (not std::call_once: opening may throw, and
                             // libstdc++'s call_once then hangs the next caller)
  std::atomic<bool> board_open{false};
  std::atomic<bool> board_unreachable{false};  // a diagnosis could not open it
  std::unique_ptr<transport::Board> board;  // set once, under board_open_mu
  std::atomic<std::uint64_t> board_tickets{0};
  std::atomic<std::uint64_t> board_done{0};
  std::atomic<int> board_waiting{0};
  std::mutex board_mu;
  std::condition_variable board_cv;
  // Set once a collective failed in a way that leaves messages in flight.
  std::mutex broken_mu;
  std::string broken;
  std::atomic<bool> is_broken{false};  // !broken.empty(), read without the lock
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
  AsyncRunner runner;  // last: stopped (and joined) first

  ~Group();  // leaves its world's list
  transport::Transport& transport() const { return *world->transport; }
  void require_member(std::string_view what) const;
};

// A group of `world`: its name ("world", "group 1 [0, 2]"), its members
// (group rank -> world rank), this process's rank in it (-1: not a member)
// and its tag space (tags.hpp); with its cost model and trace name, and
// listed in its world for the stall responder (a member only).
std::shared_ptr<detail::Group> make_group(std::shared_ptr<World> world, std::string name,
                                          std::vector<int> members, int rank, std::uint32_t slot);

}  // namespace collie
