// Making a group (make_group.hpp): with its cost model, hosts, board and
// trace name, listed for the stall responder while it lives.
#include "bootstrap/make_group.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <collie/error.hpp>

#include "executor/board_call.hpp"
#include "group/placement.hpp"
#include "watch/trace.hpp"

namespace collie {

namespace {

// The cost model Auto picks with in a group of these world ranks: the
// shared-memory one when this rank reaches every other member through
// shared memory (then every member does: they share one host), else the
// TCP one; crowding as counted on this host, and the TCP one with this
// host's cache sizes and the link between hosts as the world agreed on it.
collectives::CostModel cost_model_for(const World& world, const std::vector<int>& members) {
  const double crowded =
      crowding(world.host_ranks, world.host_cores, static_cast<int>(members.size()));
  const int self = world.config.rank;
  const bool shared = std::all_of(members.begin(), members.end(), [&](int r) {
    return r == self || world.transport->shares_memory_with(r);
  });
  if (shared) return collectives::shared_memory_cost_model(crowded);
  collectives::CostModel m;
  m.crowding = crowded;
  m.host_beta = 8 / (world.host_link.gbits * 1e9);
  m.host_alpha = world.host_link.latency_us * 1e-6;
  const auto caches = cache_sizes();
  if (caches.core > 0) m.core_cache_bytes = caches.core;
  if (caches.host > 0) m.cache_bytes = caches.host;
  return m;
}

}  // namespace

std::shared_ptr<detail::Group> make_group(std::shared_ptr<World> world, std::string name,
                                          std::vector<int> members, int rank, std::uint32_t slot) {
  auto g = std::make_shared<detail::Group>(world->config.async_calls);
  g->world = std::move(world);
  g->name = std::move(name);
  g->members = std::move(members);
  g->rank = rank;
  g->slot = slot;
  g->cost_model = cost_model_for(*g->world, g->members);
  if (g->world->hosts) {
    g->hosts = std::make_shared<const collectives::Hosts>(
        collectives::hosts_of_members(*g->world->hosts, g->members));
  }
  g->board_possible = board_possible(*g);
  if (auto* tracer = g->world->tracer.get()) g->trace_group = tracer->group_id(g->name);
  g->progress.started_at.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
  if (g->rank >= 0) {
    std::lock_guard lock(g->world->groups_mu);
    g->world->groups.emplace(g->slot, g.get());
  }
  return g;
}

}  // namespace collie
