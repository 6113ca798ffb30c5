// collie::init(): how a job's ranks meet (process_group.hpp). In order:
//
//   1. the job from the options and the environment (job_config.hpp), and
//      the address this rank advertises (first: a wrong interface fails at
//      once, not after the store);
//   2. the job's store (job_store.hpp), and this rank claimed in it;
//   3. the job's random group id, from rank 0;
//   4. the transport opened (every rank says which host it is on) and every
//      rank joined (a barrier);
//   5. how many ranks share rank 0's machine, on how many cores, for Auto's
//      cost model and the transport;
//   6. every peer's address read while the store is surely up;
//   7. the link between hosts measured, where the world spans hosts
//      (link_probe.hpp);
//   8. the world group made, and the stall responder started.
//
// A newcomer (InitOptions::join) is admitted by the members' expand()
// first (expand.cpp), which then makes the new world here, as the members
// do.
//
// Every key it reads or writes is the keys headers'; every wait has the job's
// timeout, and a rank that never comes is named.
#include <algorithm>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include <collie/log.hpp>
#include <collie/process_group.hpp>
#include <collie/transport/keys.hpp>
#include <collie/keys.hpp>
#include <collie/transport/interfaces.hpp>
#include <collie/transport/open.hpp>
#include <collie/transport/shm.hpp>

#include "watch/trace.hpp"
#include "watch/stall.hpp"
#include "group/handles.hpp"
#include "bootstrap/make_group.hpp"
#include "group/group.hpp"
#include "bootstrap/init_world.hpp"
#include "group/job_store.hpp"
#include "bootstrap/link_probe.hpp"
#include "group/placement.hpp"

namespace collie {

namespace {

// The address peers should use to reach this rank.
std::string advertised_address(const JobConfig& config) {
  const auto interfaces = transport::list_interfaces();
  if (config.method != JobConfig::Method::File && !config.master_addr.empty()) {
    return transport::choose_advertised_address(config.socket_ifname, config.master_addr,
                                                interfaces);
  }
  if (!config.socket_ifname.empty()) {
    return transport::choose_advertised_address(config.socket_ifname, "127.0.0.1", interfaces);
  }
  // file:// (or a given store with no host to route to) names no master
  // host: the first non-loopback IPv4 address, so ranks on other hosts of
  // the shared file system can connect.
  for (const auto& i : interfaces) {
    if (!i.is_v6 && !i.is_loopback) return i.address;
  }
  return "127.0.0.1";
}

// Which ranks have joined (their addresses are in the store) and which not:
// "ranks 2, 3 never joined (rank 0 is at 10.0.0.1:41234, rank 1 at ...)".
std::string who_joined(store::Store& store, int world_size) {
  std::map<int, std::string> joined;
  try {
    const std::string prefix = keys::tcp_address_prefix("world");
    const auto names = store.list_keys(prefix, std::chrono::seconds(5));
    const auto values = store.multi_get(names, std::chrono::seconds(5));
    for (std::size_t i = 0; i < names.size(); ++i)
      joined[std::stoi(names[i].substr(prefix.size()))] = values[i];
  } catch (const std::exception& e) {
    return fmt::format("some never did (the store could not say which: {})", e.what());
  }
  // Long lists are cut: the first 16 of each.
  auto list = [](const std::vector<std::string>& items) {
    std::string out;
    for (std::size_t i = 0; i < items.size() && i < 16; ++i)
      out += (i == 0 ? "" : ", ") + items[i];
    if (items.size() > 16) out += fmt::format(" and {} more", items.size() - 16);
    return out;
  };
  std::vector<std::string> missing, present;
  for (int r = 0; r < world_size; ++r) {
    if (auto it = joined.find(r); it == joined.end())
      missing.push_back(std::to_string(r));
    else
      present.push_back(fmt::format("rank {} at {}", r, it->second));
  }
  if (missing.empty()) return "every rank has published its address, yet the count is short";
  return fmt::format("rank{} {} never joined ({})", missing.size() == 1 ? "" : "s", list(missing),
                     present.empty() ? std::string("none has") : "joined: " + list(present));
}

// Each rank is claimed once per run: a second process with the same rank
// (another job on the same store by mistake) fails here, at once, instead
// of overwriting this job's keys.
void claim_rank(store::Store& store, const JobConfig& config) {
  if (store.add(keys::rank_claimed(config.rank), 1) <= 1) return;
  const auto where =
      config.method == JobConfig::Method::File
          ? fmt::format("the store file {}: is another job using this file?", config.file_path)
      : config.method == JobConfig::Method::Etcd
          ? fmt::format("etcd under /collie/{}/: is another job using that name, or did one of "
                        "that name run before? (give each run its own JOB, or remove the old "
                        "keys: etcdctl del --prefix /collie/{}/)",
                        config.etcd_job, config.etcd_job)
      : config.method == JobConfig::Method::Given
          ? fmt::format("the program's store{}: is another group using it?",
                        config.given_store_name.empty() ? "" : " (" + config.given_store_name + ")")
          : fmt::format("the store at {}: is another job using this MASTER_PORT?",
                        join_host_port(config.master_addr, config.master_port));
  throw Error(fmt::format("rank {} is already taken in {}", config.rank, where));
}

// A random id per job run, from rank 0: a rank of another job (or an
// earlier run) that reaches this one's ports is refused in the handshake.
std::uint64_t agree_on_group_id(store::Store& store, const JobConfig& config) {
  if (config.rank == 0) {
    const auto id = crypto::random_u64();
    store.set(keys::kGroupId, fmt::format("{:016x}", id));
    return id;
  }
  const std::string id = store.get(keys::kGroupId);
  try {
    return std::stoull(id, nullptr, 16);
  } catch (const std::exception&) {
    throw Error(
        fmt::format("rank {}: the store's '{}' holds '{}', not rank 0's group id: is another "
                    "program using this store?",
                    config.rank, keys::kGroupId, id));
  }
}

// Opens the transport (it waits for every rank to say which host it is on,
// to choose shared memory or TCP per peer) and waits for every rank to
// join; a rank that never comes is named.
void join(World& world, const transport::TransportOptions& options, const std::string& machine) {
  const auto& config = world.config;
  auto& store = world.job->store();
  if (options.settings.seal == "off" && config.rank == 0) {
    static std::once_flag said;
    std::call_once(said, [] {
      collie::log().warn(
          "COLLIE_SEAL=off: messages between hosts travel in the clear, without integrity: "
          "anyone on the network between can read and change them (docs/security.md)");
    });
  }
  try {
    world.transport = transport::open_transport(world.job->shared_store(), options);
    if (config.world_size > 1) {
      store.add(machine, 1);
      store.set(keys::rank_host(config.rank),
                options.host_id.empty() ? transport::host_identity() : options.host_id);
    }
    store.barrier(keys::kJoined, static_cast<std::uint32_t>(config.world_size));
    world.job->joined();
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format(
        "rank {} waited {:.0f} s for all {} ranks to join, and {}: check that every rank was "
        "started with WORLD_SIZE={} and the same store ({})",
        config.rank, std::chrono::duration<double>(config.timeout).count(), config.world_size,
        who_joined(store, config.world_size), config.world_size, e.what()));
  } catch (const ConnectionError& e) {
    if (config.method == JobConfig::Method::File || config.method == JobConfig::Method::Given ||
        config.method == JobConfig::Method::Etcd ||
        config.store_hosted_by_launcher || config.rank == 0)
      throw;
    throw ConnectionError(fmt::format(
        "rank {} was waiting for all {} ranks to join when the store went away ({}): rank 0 "
        "hosts it, so rank 0 has exited, perhaps at its own timeout; its error names the ranks "
        "that never joined",
        config.rank, config.world_size, e.what()));
  }
}

// Rank 0 reads every rank's host (up to this many ranks; beyond, the
// algorithms do without).
constexpr int kMostRanksWithHosts = 4096;

// How many ranks share rank 0's machine and on how many cores, and which
// host each rank is on: counted and said before the barrier, read by rank 0
// after it and passed on.
void agree_on_placement(World& world, const std::string& machine) {
  const auto& config = world.config;
  auto& store = world.job->store();
  if (config.rank == 0) {
    world.host_ranks = static_cast<int>(store.add(machine, 0));
    world.host_cores = usable_cores();
    std::string text = fmt::format("{} {}", world.host_ranks, world.host_cores);
    if (config.world_size <= kMostRanksWithHosts) {
      std::vector<std::string> keys;
      for (int r = 0; r < config.world_size; ++r)
        keys.push_back(keys::rank_host(r));
      auto hosts = collectives::hosts_from_names(store.multi_get(keys));
      for (int h : hosts.host_of())
        text += fmt::format(" {}", h);
      world.hosts = std::make_shared<const collectives::Hosts>(std::move(hosts));
    }
    store.set(keys::kPlacement, text);
    return;
  }
  std::string text;
  const auto context = [&](const std::exception& e) {
    return fmt::format(
        "rank {}: reading rank 0's count of the ranks on its machine ('{}', written as soon as "
        "all {} joined): {}; has rank 0 exited?",
        config.rank, keys::kPlacement, config.world_size, e.what());
  };
  try {
    text = store.get(keys::kPlacement);
  } catch (const TimeoutError& e) {
    throw TimeoutError(context(e));
  } catch (const ConnectionError& e) {
    throw ConnectionError(context(e));
  }
  std::istringstream placement(text);
  std::vector<int> numbers;
  for (int x = 0; placement >> x;)
    numbers.push_back(x);
  const auto n = static_cast<std::size_t>(config.world_size);
  const bool valid =
      placement.eof() && numbers.size() >= 2 && numbers[0] >= 1 && numbers[1] >= 1 &&
      (numbers.size() == 2 || numbers.size() == 2 + n) &&
      std::all_of(numbers.begin() + 2, numbers.end(),
                  [&](int h) { return h >= 0 && h < config.world_size; });
  if (!valid)
    throw Error(fmt::format(
        "rank {}: the store's '{}' holds '{}', not rank 0's \"<ranks> <cores> <host of each "
        "rank>\": is another program using this store?",
        config.rank, keys::kPlacement, text));
  world.host_ranks = numbers[0];
  world.host_cores = numbers[1];
  if (numbers.size() > 2) {
    world.hosts = std::make_shared<const collectives::Hosts>(
        std::vector<int>(numbers.begin() + 2, numbers.end()));
  }
}

}  // namespace

ProcessGroup init(const InitOptions& options) {
  // A SIGTERM handler the program has ends collie's waits first (interrupt.hpp).
  chain_sigterm_handler();
  auto config = resolve_job_config(options);
  if (config.join) return detail::Access::group(join_running_job(std::move(config)));
  return detail::Access::group(make_world(std::move(config), {}));
}

std::shared_ptr<detail::Group> make_world(JobConfig job_config, const WorldSeed& seed) {
  auto world = std::make_shared<World>();
  world->config = std::move(job_config);
  const auto& config = world->config;
  if (!config.trace_dir.empty())
    world->tracer = Tracer::open(config.trace_dir, config.rank, config.world_size);
  world->advertised_host = advertised_address(config);
  world->job = std::make_unique<JobStore>(config);
  auto& store = world->job->store();
  claim_rank(store, config);
  world->run_store = seed.run_store ? seed.run_store : world->job->run_store();

  transport::TransportOptions transport_options;
  transport_options.rank = config.rank;
  transport_options.world_size = config.world_size;
  transport_options.group = "world";
  transport_options.token = config.token;
  transport_options.timeout = config.timeout;
  transport_options.listen_address = world->advertised_host;
  transport_options.lane_addresses = transport::choose_lane_addresses(
      config.lane_ifname, world->advertised_host, transport::list_interfaces());
  transport_options.settings = config.transport;
  transport_options.group_id = agree_on_group_id(store, config);
  world->group_id = transport_options.group_id;

  // Who this process is, for other ranks' stall reports (stall.hpp): a rank
  // stopped before its responder spoke is still looked at in /proc.
  const bool stall_reports = config.method != JobConfig::Method::File &&
                             (config.method != JobConfig::Method::Given || config.given_served) &&
                             config.stall_time.count() > 0 && config.world_size > 1;
  if (stall_reports) store.set(keys::stall_process(config.rank), process_identity());

  const std::string machine = keys::machine(machine_id());
  join(*world, transport_options, machine);
  if (config.world_size > 1) {
    agree_on_placement(*world, machine);
    // Before any mesh connection opens (they open at the first message).
    world->transport->set_host_load(world->host_ranks, world->host_cores);
  }
  // Every address, now, while the store is surely up: a rank 0 that hosts
  // the store may finish and exit before the others connect to each other.
  if (config.world_size <= 4096) world->transport->prefetch();
  world->host_link = seed.host_link ? *seed.host_link : agree_on_host_link(*world);
  world->transport->set_streams(world->host_link.streams);  // where COLLIE_STREAMS=auto
  collie::log().debug("rank {}/{} joined; {}", config.rank, config.world_size,
                      world->transport->describe());
  if (world->tracer) world->tracer->label("transport: " + world->transport->describe());

  std::vector<int> everyone;
  for (int r = 0; r < config.world_size; ++r)
    everyone.push_back(r);
  auto group = make_group(world, seed.name, std::move(everyone), config.rank, 0);
  if (stall_reports) {
    auto lookup = [w = world.get()](std::uint32_t slot, std::uint64_t sequence) {
      return answer_query(*w, slot, sequence);
    };
    if (config.method == JobConfig::Method::Etcd) {
      // etcd: the responder waits in the job's view itself.
      world->responder =
          std::make_unique<StallResponder>(world->job->shared_store(), config.rank, lookup);
    } else {
      // A given store's keys lie under its own prefix in the collie store.
      const auto prefix = config.given_key_prefix.empty()
                              ? world->job->prefix()
                              : config.given_key_prefix + "/" + world->job->prefix();
      world->responder = std::make_unique<StallResponder>(config, prefix, lookup);
    }
  }
  return group;
}

}  // namespace collie
