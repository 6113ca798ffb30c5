// collie::mw::run() (master_worker.hpp): the workers' group, then the
// master's program on rank 0 and the workers' streams elsewhere.
#include <numeric>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/master_worker.hpp>

#include "group/group.hpp"
#include "group/handles.hpp"
#include "master_state.hpp"
#include "worker.hpp"

namespace collie::mw {

int run(ProcessGroup& world, const Kernels& kernels, const std::function<void(Master&)>& master,
        const Options& given) {
  const auto& group = collie::detail::Access::group_of(world);
  if (group->slot != 0 || world.rank() < 0)
    throw ArgumentError("master-worker: run() takes the world group (every rank of the job)");
  Options options = given;
  if (options.timeout.count() <= 0) options.timeout = world.config().timeout;
  if (options.window == 0) throw ArgumentError("master-worker: the window must be at least 1");
  // The workers' own group, for their collectives: every rank makes it.
  std::optional<ProcessGroup> workers;
  if (world.size() > 1) {
    std::vector<int> ranks(static_cast<std::size_t>(world.size() - 1));
    std::iota(ranks.begin(), ranks.end(), 1);
    workers = world.new_group(ranks);
  }
  auto transport = group->world->transport;
  if (world.rank() != 0) {
    Worker w(transport, *workers, kernels, options, world.advertised_host());
    w.serve();
    return 0;
  }
  // The stall watch reads the workers' process identities where init
  // published them (a TCP store with stall reports on).
  auto state = std::make_shared<detail::MasterState>(transport, kernels, options, &world.store(),
                                                     world.config().stall_time);
  Master m(state);
  try {
    master(m);
  } catch (...) {
    try {
      state->shutdown();
    } catch (const std::exception& e) {
      log().warn("master-worker: shutting the workers down after the master's error: {}",
                 e.what());
    }
    throw;
  }
  state->shutdown();
  return 0;
}

}  // namespace collie::mw
