// A group's own rules (group.hpp): who may call it, and leaving its
// world's list when it goes.
#include "group/group.hpp"

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie {

void detail::Group::require_member(std::string_view what) const {
  if (rank >= 0) return;
  throw Error(
      fmt::format("rank {} of the world called {} on {}, which it is not a member of: "
                  "only the ranks given to new_group may use the group",
                  world->config.rank, what, name));
}

detail::Group::~Group() {
  if (rank < 0 || !world) return;
  std::lock_guard lock(world->groups_mu);
  const auto it = world->groups.find(slot);
  if (it != world->groups.end() && it->second == this) world->groups.erase(it);
}

}  // namespace collie
