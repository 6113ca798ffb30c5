#include <algorithm>
#include <map>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/address.hpp>
#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include "job_store.hpp"
#include <collie/log.hpp>
#include <collie/process_group.hpp>
#include <collie/transport/interfaces.hpp>
#include <collie/transport/open.hpp>

#include "group.hpp"
#include "tags.hpp"
#include "placement.hpp"

namespace collie {

namespace {

void check_tag(int tag, int rank, const char* op, int peer) {
  if (tag < 0) {
    throw Error(fmt::format("rank {}: {} rank {}: tag {} is negative; tags are 0 to 2^31 - 1", rank,
                            op, peer, tag));
  }
}

// The cost model Auto picks with in a group of these world ranks: the
// shared-memory one when this rank reaches every other member through
// shared memory (then every member does: they share one host), else the
// TCP one; crowding as counted on this host, and the TCP one with this
// host's cache sizes.
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
  const auto caches = cache_sizes();
  if (caches.core > 0) m.core_cache_bytes = caches.core;
  if (caches.host > 0) m.cache_bytes = caches.host;
  return m;
}

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
  // host: the first non-loopback IPv4 address, so
  // ranks on other hosts of the shared file system can connect.
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
    const std::string prefix = "world/addr/";
    const auto keys = store.list_keys(prefix, std::chrono::seconds(5));
    const auto values = store.multi_get(keys, std::chrono::seconds(5));
    for (std::size_t i = 0; i < keys.size(); ++i)
      joined[std::stoi(keys[i].substr(prefix.size()))] = values[i];
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

}  // namespace

// ---- ProcessGroup ----

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

void detail::Group::enlist() {
  progress.started_at.store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now().time_since_epoch())
                                .count());
  if (rank < 0) return;
  std::lock_guard lock(world->groups_mu);
  world->groups.emplace(slot, this);
}

ProcessGroup::ProcessGroup(std::shared_ptr<detail::Group> group) : impl_(std::move(group)) {}

int ProcessGroup::rank() const {
  return impl_->rank;
}
int ProcessGroup::size() const {
  return static_cast<int>(impl_->members.size());
}
const std::string& ProcessGroup::name() const {
  return impl_->name;
}
const JobConfig& ProcessGroup::config() const {
  return impl_->world->config;
}
store::Store& ProcessGroup::store() const {
  return impl_->world->job->store();
}
const std::string& ProcessGroup::advertised_host() const {
  return impl_->world->advertised_host;
}
std::string ProcessGroup::describe_transport() const {
  return impl_->transport().describe();
}

namespace {

// The world rank of group rank `peer`; a clear error for one out of range.
int world_rank(const detail::Group& g, int peer, const char* op) {
  if (peer < 0 || peer >= static_cast<int>(g.members.size())) {
    throw Error(fmt::format("rank {}: {} rank {}: {} has ranks 0 to {}", g.rank, op, peer, g.name,
                            g.members.size() - 1));
  }
  return g.members[static_cast<std::size_t>(peer)];
}

}  // namespace

namespace {

// A point-to-point call on device memory, staged (work.hpp); nullopt for
// host memory, which costs a pointer query and nothing else.
std::optional<Work> staged(detail::Group& g, bool sending, const void* data, std::size_t bytes,
                           int group_peer, int world_peer, int tag, const char* op) {
  if (device::backend() == nullptr || bytes == 0) return std::nullopt;
  const device::CallName name{g.rank, op, group_peer};
  auto engine = device::place(*g.engines, MemoryKind::Auto, data, bytes, nullptr, 0, nullptr, name,
                              g.world->config.timeout)
                    .engine;
  if (!engine) return std::nullopt;
  const auto t = p2p_tag(g.slot, tag);
  if (sending) return staged_send(g.world->transport, world_peer, t, data, bytes, engine, name);
  // (A receive's buffer: the caller's writable one.)
  return staged_recv(g.world->transport, world_peer, t, const_cast<void*>(data), bytes, engine,
                     name);
}

}  // namespace

Work ProcessGroup::isend(const void* data, std::size_t bytes, int dst, int tag) {
  impl_->require_member("isend");
  check_tag(tag, rank(), "isend to", dst);
  const int to = world_rank(*impl_, dst, "isend to");
  if (auto w = staged(*impl_, true, data, bytes, dst, to, tag, "isend to")) return std::move(*w);
  auto request = impl_->transport().isend(to, p2p_tag(impl_->slot, tag), data, bytes);
  return point_to_point_work(impl_->world->transport, std::move(request));
}

Work ProcessGroup::irecv(void* data, std::size_t bytes, int src, int tag) {
  impl_->require_member("irecv");
  check_tag(tag, rank(), "irecv from", src);
  const int from = world_rank(*impl_, src, "irecv from");
  if (auto w = staged(*impl_, false, data, bytes, src, from, tag, "irecv from"))
    return std::move(*w);
  auto request = impl_->transport().irecv(from, p2p_tag(impl_->slot, tag), data, bytes);
  return point_to_point_work(impl_->world->transport, std::move(request));
}

// The blocking forms wait on the request directly: no Work to allocate.
void ProcessGroup::send(const void* data, std::size_t bytes, int dst, int tag) {
  impl_->require_member("send");
  check_tag(tag, rank(), "send to", dst);
  const int to = world_rank(*impl_, dst, "send to");
  if (auto w = staged(*impl_, true, data, bytes, dst, to, tag, "send to")) return w->wait();
  auto& t = impl_->transport();
  t.wait(t.isend(to, p2p_tag(impl_->slot, tag), data, bytes));
}

void ProcessGroup::recv(void* data, std::size_t bytes, int src, int tag) {
  impl_->require_member("recv");
  check_tag(tag, rank(), "recv from", src);
  const int from = world_rank(*impl_, src, "recv from");
  if (auto w = staged(*impl_, false, data, bytes, src, from, tag, "recv from")) return w->wait();
  auto& t = impl_->transport();
  t.wait(t.irecv(from, p2p_tag(impl_->slot, tag), data, bytes));
}

Work ProcessGroup::irecv_any(void* data, std::size_t bytes, int tag) {
  impl_->require_member("irecv_any");
  if (tag < 0) {
    throw Error(fmt::format("rank {}: recv from any rank: tag {} is negative; tags are 0 to 2^31 - 1",
                            rank(), tag));
  }
  if (device::backend() != nullptr && bytes > 0 && device::backend()->device_of(data) >= 0) {
    throw Error(fmt::format("rank {}: a receive from any rank takes host memory only; name the "
                            "sender to receive into device memory",
                            rank()));
  }
  return any_source_work(impl_->world->transport, impl_->members, p2p_tag(impl_->slot, tag), data,
                         bytes, impl_->world->config.timeout,
                         fmt::format("rank {}: recv from any rank of {} (tag {}, {} bytes)", rank(),
                                     name(), tag, bytes));
}

int ProcessGroup::recv_any(void* data, std::size_t bytes, int tag) {
  auto work = irecv_any(data, bytes, tag);
  work.wait();
  return work.source();
}

namespace {

// A tag space (tags.hpp) for a new group, the same on every rank of
// `parent`: one above the highest any of them has used, agreed with an
// all_reduce over the parent (as MPI's communicators agree on context ids).
// Two live groups that share a rank got their slots in calls that rank took
// part in, one after the other, so the later one's is higher: they can
// never match each other's messages. A process makes one new group at a
// time (the mutex), so two of its groups never agree at once.
std::uint32_t agree_on_slot(ProcessGroup& parent_handle, const detail::Group& parent) {
  auto& world = *parent.world;
  std::lock_guard lock(world.new_group_mu);
  std::int64_t highest = world.highest_slot;
  const auto context = [&](const std::exception& e) {
    return fmt::format(
        "rank {}: new_group on {}: its ranks agree on the new group's tag space with a "
        "collective, so every rank of {} must call new_group, in the same order among its "
        "collectives on it: {}",
        parent.rank, parent.name, parent.name, e.what());
  };
  try {
    parent_handle.all_reduce(std::span(&highest, 1), ReduceOp::Max);
  } catch (const MismatchError& e) {
    throw MismatchError(context(e));
  } catch (const TimeoutError& e) {
    throw TimeoutError(context(e));
  } catch (const ConnectionError& e) {
    throw ConnectionError(context(e));
  } catch (const Error& e) {
    throw Error(context(e));
  }
  if (highest >= static_cast<std::int64_t>(kMaxSlot)) {
    throw Error(fmt::format(
        "rank {}: new_group on {}: the job has made {} groups, all the tag spaces there are",
        parent.rank, parent.name, kMaxSlot));
  }
  world.highest_slot = highest + 1;
  return static_cast<std::uint32_t>(highest + 1);
}

}  // namespace

ProcessGroup ProcessGroup::new_group(const std::vector<int>& ranks) {
  auto& parent = *impl_;
  const int n = size();
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (int r : ranks) {
    if (r < 0 || r >= n)
      throw Error(
          fmt::format("new_group: rank {} is not in {} (ranks 0 to {})", r, parent.name, n - 1));
    if (seen[static_cast<std::size_t>(r)])
      throw Error(fmt::format("new_group: rank {} is listed twice", r));
    seen[static_cast<std::size_t>(r)] = true;
  }
  if (ranks.empty()) throw Error("new_group: a group needs at least one rank");
  auto child = std::make_shared<detail::Group>();
  child->world = parent.world;
  const std::uint32_t index = ++parent.children;
  if (parent.rank >= 0) child->slot = agree_on_slot(*this, parent);
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    child->members.push_back(parent.members[static_cast<std::size_t>(ranks[i])]);
    if (ranks[i] == parent.rank) child->rank = static_cast<int>(i);
  }
  child->cost_model = cost_model_for(*child->world, child->members);
  child->name = fmt::format("group {} [{}]", index, fmt::join(child->members, ", "));
  if (auto* tracer = child->world->tracer.get()) child->trace_group = tracer->group_id(child->name);
  child->enlist();
  return ProcessGroup(std::move(child));
}

// ---- init ----

ProcessGroup init(const InitOptions& options) {
  // A SIGTERM handler the program has ends collie's waits first (interrupt.hpp).
  chain_sigterm_handler();
  auto impl = std::make_shared<World>();
  impl->config = resolve_job_config(options);
  const auto& config = impl->config;
  if (!config.trace_dir.empty())
    impl->tracer = Tracer::open(config.trace_dir, config.rank, config.world_size);
  // Where peers reach this rank: first, so that a wrong interface fails
  // at once, not after the store.
  impl->advertised_host = advertised_address(config);
  impl->job = std::make_unique<JobStore>(config);
  auto& store = impl->job->store();

  // A random id per job run: a rank of another job (or an earlier run) that
  // reaches this one's ports is refused in the handshake.
  transport::TransportOptions transport_options;
  transport_options.rank = config.rank;
  transport_options.world_size = config.world_size;
  transport_options.group = "world";
  transport_options.token = config.token;
  transport_options.timeout = config.timeout;
  transport_options.listen_address = impl->advertised_host;
  transport_options.settings = config.transport;
  // Each rank is claimed once per run: a second process with the same rank
  // (another job on the same store by mistake) fails here, at once, instead
  // of overwriting this job's keys.
  if (store.add(fmt::format("world/rank/{}/claimed", config.rank), 1) > 1) {
    const auto where =
        config.method == JobConfig::Method::File
            ? fmt::format("the store file {}: is another job using this file?", config.file_path)
        : config.method == JobConfig::Method::Given
            ? fmt::format("the program's store{}: is another group using it?",
                          config.given_store_name.empty() ? "" : " (" + config.given_store_name + ")")
            : fmt::format("the store at {}: is another job using this MASTER_PORT?",
                          join_host_port(config.master_addr, config.master_port));
    throw Error(fmt::format("rank {} is already taken in {}", config.rank, where));
  }
  if (config.rank == 0) {
    transport_options.group_id = crypto::random_u64();
    store.set("world/id", fmt::format("{:016x}", transport_options.group_id));
  } else {
    const std::string id = store.get("world/id");
    try {
      transport_options.group_id = std::stoull(id, nullptr, 16);
    } catch (const std::exception&) {
      throw Error(
          fmt::format("rank {}: the store's 'world/id' holds '{}', not rank 0's group id: "
                      "is another program using this store?",
                      config.rank, id));
    }
  }
  // Who this process is, for other ranks' stall reports (stall.hpp): a
  // rank stopped before its responder spoke is still looked at in /proc.
  const bool stall_reports = config.method != JobConfig::Method::File &&
                             config.method != JobConfig::Method::Given &&
                             config.stall_time.count() > 0 && config.world_size > 1;
  if (stall_reports)
    store.set(fmt::format("stall/proc/{}", config.rank), process_identity());
  // How many ranks share each machine, for Auto's cost model: counted
  // before the barrier, read by rank 0 after it and passed on.
  const std::string machine_key = "world/machine/" + machine_id();
  try {
    // (Opening the transport waits for every rank to say which host it is
    // on, to choose shared memory or TCP per peer: a rank that never comes
    // is named here as at the barrier.)
    impl->transport = transport::open_transport(impl->job->shared_store(), transport_options);
    if (config.world_size > 1) store.add(machine_key, 1);
    store.barrier("world/joined", static_cast<std::uint32_t>(config.world_size));
    impl->job->joined();
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format(
        "rank {} waited {:.0f} s for all {} ranks to join, and {}: check that every rank was "
        "started with WORLD_SIZE={} and the same store ({})",
        config.rank, std::chrono::duration<double>(config.timeout).count(), config.world_size,
        who_joined(store, config.world_size), config.world_size, e.what()));
  } catch (const ConnectionError& e) {
    if (config.method == JobConfig::Method::File || config.method == JobConfig::Method::Given ||
        config.store_hosted_by_launcher || config.rank == 0)
      throw;
    throw ConnectionError(fmt::format(
        "rank {} was waiting for all {} ranks to join when the store went away ({}): rank 0 "
        "hosts it, so rank 0 has exited, perhaps at its own timeout; its error names the ranks "
        "that never joined",
        config.rank, config.world_size, e.what()));
  }
  if (config.world_size > 1) {
    if (config.rank == 0) {
      impl->host_ranks = static_cast<int>(store.add(machine_key, 0));
      impl->host_cores = usable_cores();
      store.set("world/placement", fmt::format("{} {}", impl->host_ranks, impl->host_cores));
    } else {
      std::string text;
      const auto context = [&](const std::exception& e) {
        return fmt::format(
            "rank {}: reading rank 0's count of the ranks on its machine ('world/placement', "
            "written as soon as all {} joined): {}; has rank 0 exited?",
            config.rank, config.world_size, e.what());
      };
      try {
        text = store.get("world/placement");
      } catch (const TimeoutError& e) {
        throw TimeoutError(context(e));
      } catch (const ConnectionError& e) {
        throw ConnectionError(context(e));
      }
      std::istringstream placement(text);
      if (!(placement >> impl->host_ranks >> impl->host_cores) || impl->host_ranks < 1 ||
          impl->host_cores < 1)
        throw Error(fmt::format(
            "rank {}: the store's 'world/placement' holds '{}', not rank 0's \"<ranks> "
            "<cores>\": is another program using this store?",
            config.rank, text));
    }
    // Before any mesh connection opens (they open at the first message).
    impl->transport->set_host_load(impl->host_ranks, impl->host_cores);
  }
  // Every address, now, while the store is surely up: a rank 0 that hosts
  // the store may finish and exit before the others connect to each other.
  if (config.world_size <= 4096) impl->transport->prefetch();
  collie::log().debug("rank {}/{} joined; {}", config.rank, config.world_size,
                      impl->transport->describe());
  if (impl->tracer) impl->tracer->label("transport: " + impl->transport->describe());
  auto group = std::make_shared<detail::Group>();
  group->world = std::move(impl);
  group->name = "world";
  if (auto* tracer = group->world->tracer.get()) group->trace_group = tracer->group_id(group->name);
  group->rank = config.rank;
  for (int r = 0; r < config.world_size; ++r)
    group->members.push_back(r);
  group->cost_model = cost_model_for(*group->world, group->members);
  group->enlist();
  auto& world = *group->world;
  if (stall_reports) {
    world.responder = std::make_unique<StallResponder>(
        config, world.job->prefix(), [w = &world](std::uint32_t slot, std::uint64_t sequence) {
          return answer_query(*w, slot, sequence);
        });
  }
  return detail::Access::group(std::move(group));
}

}  // namespace collie
