// The process group's handle (process_group.hpp): what a group is, its
// sends and receives (staged through pinned memory for device buffers), and
// new_group. The collectives are collective.cpp's and vector_collective.cpp's;
// init() is init.cpp's.
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <collie/error.hpp>
#include <collie/process_group.hpp>

#include "work.hpp"
#include "bootstrap/link_probe.hpp"
#include "bootstrap/make_group.hpp"
#include "group/group.hpp"
#include "group/job_store.hpp"
#include "group/tags.hpp"

namespace collie {

namespace {

void check_tag(int tag, int rank, const char* op, int peer) {
  if (tag < 0) {
    throw Error(fmt::format("rank {}: {} rank {}: tag {} is negative; tags are 0 to 2^31 - 1", rank,
                            op, peer, tag));
  }
}

}  // namespace

// ---- ProcessGroup ----

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
std::string ProcessGroup::describe_hosts() const {
  if (!impl_->hosts) return "not known";
  auto text = collectives::describe(*impl_->hosts);
  if (impl_->hosts->hosts() > 1) text += "; link " + describe(impl_->world->host_link);
  return text;
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
  const std::uint32_t index = ++parent.children;
  const std::uint32_t slot = parent.rank >= 0 ? agree_on_slot(*this, parent) : 0;
  std::vector<int> members;
  int rank = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    members.push_back(parent.members[static_cast<std::size_t>(ranks[i])]);
    if (ranks[i] == parent.rank) rank = static_cast<int>(i);
  }
  auto name = fmt::format("group {} [{}]", index, fmt::join(members, ", "));
  auto child = make_group(parent.world, std::move(name), std::move(members), rank, slot);
  return ProcessGroup(std::move(child));
}

}  // namespace collie
