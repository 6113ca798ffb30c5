// Making a group (make_group.cpp): init's world, new_group's and shrink's
// groups.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "group/group.hpp"

namespace collie {

// A group of `world`: its name ("world", "group 1 [0, 2]"), its members
// (group rank -> world rank), this process's rank in it (-1: not a member)
// and its tag space (tags.hpp); with its cost model and trace name, and
// listed in its world for the stall responder (a member only).
std::shared_ptr<detail::Group> make_group(std::shared_ptr<World> world, std::string name,
                                          std::vector<int> members, int rank, std::uint32_t slot);

}  // namespace collie
