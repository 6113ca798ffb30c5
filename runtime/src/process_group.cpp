#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/job_store.hpp>
#include <collie/log.hpp>
#include <collie/process_group.hpp>
#include <collie/transport/interfaces.hpp>

namespace collie {

struct ProcessGroup::Impl {
  JobConfig config;
  std::unique_ptr<JobStore> job;
  // Declared after the store, so destroyed before it: connections close
  // before the store (which rank 0 may host) goes away.
  std::shared_ptr<transport::Mesh> mesh;
};

namespace {

class PointToPoint final : public Work::State {
 public:
  PointToPoint(std::shared_ptr<transport::Mesh> mesh, transport::RequestPtr request)
      : mesh_(std::move(mesh)), request_(std::move(request)) {}
  void wait(std::optional<std::chrono::milliseconds> timeout) override {
    mesh_->wait(request_, timeout);
  }
  bool test() const override { return mesh_->test(request_); }

 private:
  std::shared_ptr<transport::Mesh> mesh_;
  transport::RequestPtr request_;
};

void check_tag(int tag, int rank, const char* op, int peer) {
  if (tag < 0) {
    throw Error(fmt::format("rank {}: {} rank {}: tag {} is negative; tags are 0 to 2^31 - 1", rank,
                            op, peer, tag));
  }
}

// The address peers should use to reach this rank.
std::string advertised_address(const JobConfig& config) {
  const auto interfaces = transport::list_interfaces();
  if (config.method != JobConfig::Method::File) {
    return transport::choose_advertised_address(config.socket_ifname, config.master_addr,
                                                interfaces);
  }
  if (!config.socket_ifname.empty()) {
    return transport::choose_advertised_address(config.socket_ifname, "127.0.0.1", interfaces);
  }
  // file:// names no master host: the first non-loopback IPv4 address, so
  // ranks on other hosts of the shared file system can connect.
  for (const auto& i : interfaces) {
    if (!i.is_v6 && !i.is_loopback) return i.address;
  }
  return "127.0.0.1";
}

}  // namespace

// ---- Work ----

Work::~Work() {
  if (!state_ || waited_ || state_->test()) return;
  try {
    state_->wait(std::nullopt);
  } catch (const std::exception& e) {
    collie::log().error("a Work destroyed while pending failed: {}", e.what());
  }
}

Work& Work::operator=(Work&& other) noexcept {
  if (this != &other) {
    Work old(std::move(*this));  // waits for what this one held
    state_ = std::move(other.state_);
    waited_ = other.waited_;
  }
  return *this;
}

void Work::wait() {
  if (!state_) return;
  waited_ = true;
  state_->wait(std::nullopt);
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!state_) return;
  waited_ = true;
  state_->wait(timeout);
}

bool Work::is_completed() const {
  return !state_ || state_->test();
}

// ---- ProcessGroup ----

ProcessGroup::ProcessGroup(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

int ProcessGroup::rank() const {
  return impl_->config.rank;
}
int ProcessGroup::size() const {
  return impl_->config.world_size;
}
const JobConfig& ProcessGroup::config() const {
  return impl_->config;
}
store::Store& ProcessGroup::store() const {
  return impl_->job->store();
}
transport::Mesh& ProcessGroup::mesh() const {
  return *impl_->mesh;
}

Work ProcessGroup::isend(const void* data, std::size_t bytes, int dst, int tag) {
  check_tag(tag, rank(), "isend to", dst);
  auto request = impl_->mesh->isend(dst, static_cast<std::uint64_t>(tag), data, bytes);
  return Work(std::make_unique<PointToPoint>(impl_->mesh, std::move(request)));
}

Work ProcessGroup::irecv(void* data, std::size_t bytes, int src, int tag) {
  check_tag(tag, rank(), "irecv from", src);
  auto request = impl_->mesh->irecv(src, static_cast<std::uint64_t>(tag), data, bytes);
  return Work(std::make_unique<PointToPoint>(impl_->mesh, std::move(request)));
}

// The blocking forms wait on the request directly: no Work to allocate.
void ProcessGroup::send(const void* data, std::size_t bytes, int dst, int tag) {
  check_tag(tag, rank(), "send to", dst);
  auto& mesh = *impl_->mesh;
  mesh.wait(mesh.isend(dst, static_cast<std::uint64_t>(tag), data, bytes));
}

void ProcessGroup::recv(void* data, std::size_t bytes, int src, int tag) {
  check_tag(tag, rank(), "recv from", src);
  auto& mesh = *impl_->mesh;
  mesh.wait(mesh.irecv(src, static_cast<std::uint64_t>(tag), data, bytes));
}

// ---- init ----

ProcessGroup init(const InitOptions& options) {
  auto impl = std::make_shared<ProcessGroup::Impl>();
  impl->config = resolve_job_config(options);
  const auto& config = impl->config;
  impl->job = std::make_unique<JobStore>(config);
  auto& store = impl->job->store();

  // A random id per job run: a rank of another job (or an earlier run) that
  // reaches this one's ports is refused in the handshake.
  transport::MeshOptions mesh;
  mesh.rank = config.rank;
  mesh.world_size = config.world_size;
  mesh.group = "world";
  mesh.token = config.token;
  mesh.timeout = config.timeout;
  mesh.listen_address = advertised_address(config);
  if (config.rank == 0) {
    mesh.group_id = transport::Mesh::random_group_id();
    store.set("world/id", fmt::format("{:016x}", mesh.group_id));
  } else {
    const std::string id = store.get("world/id");
    try {
      mesh.group_id = std::stoull(id, nullptr, 16);
    } catch (const std::exception&) {
      throw Error(
          fmt::format("rank {}: the store's 'world/id' holds '{}', not rank 0's group id: "
                      "is another program using this store?",
                      config.rank, id));
    }
  }
  impl->mesh = std::make_shared<transport::Mesh>(impl->job->shared_store(), mesh);
  try {
    store.barrier("world/joined", static_cast<std::uint32_t>(config.world_size));
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format(
        "rank {} waited {:.0f} s for all {} ranks to join, and some never did: check that "
        "every rank was started with WORLD_SIZE={} and the same store ({})",
        config.rank, std::chrono::duration<double>(config.timeout).count(), config.world_size,
        config.world_size, e.what()));
  }
  // Every address, now, while the store is surely up: a rank 0 that hosts
  // the store may finish and exit before the others connect to each other.
  if (config.world_size <= 4096) impl->mesh->prefetch_addresses();
  collie::log().debug("rank {}/{} joined; listening on {}", config.rank, config.world_size,
                      impl->mesh->address());
  return ProcessGroup(std::move(impl));
}

}  // namespace collie
