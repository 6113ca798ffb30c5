// Making a world once its job is resolved (init.cpp): shared by init(), a
// newcomer's init() and the members' expand() (expand.cpp), which make the
// expanded world the same way, in a namespace of the job's store.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <collie/job_config.hpp>
#include <collie/store/store.hpp>

#include "group/group.hpp"
#include "bootstrap/link_probe.hpp"

namespace collie {

// What a world made by expand() keeps from the job it grew from.
struct WorldSeed {
  std::string name = "world";                // the world group's name, for messages
  std::shared_ptr<store::Store> run_store;   // null: the new JobStore's (a first world)
  std::optional<HostLink> host_link;         // given: not measured again
};

// init()'s steps 2-8 for `config`: the world group, or throws what init()
// throws.
std::shared_ptr<detail::Group> make_world(JobConfig config, const WorldSeed& seed);

// init() for a newcomer (config.join): waits in the job's store until the
// members' expand() admits it, then makes the new world with them.
std::shared_ptr<detail::Group> join_running_job(JobConfig config);

}  // namespace collie
