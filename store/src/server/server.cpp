// The store server's public face (server.hpp): a StoreServer is its core
// (server_core.hpp), running on a thread of its own.
#include <sys/resource.h>

#include <collie/store/server.hpp>

#include "server_core.hpp"

namespace collie::store {

class StoreServer::Impl : public ServerCore {
 public:
  using ServerCore::ServerCore;
};

StoreServer::StoreServer(ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
StoreServer::~StoreServer() = default;
std::uint16_t StoreServer::port() const {
  return impl_->port();
}
std::vector<std::string> StoreServer::addresses() const {
  return impl_->addresses();
}
std::size_t StoreServer::connections() const {
  return impl_->connections();
}
StoreServer::Stats StoreServer::stats() const {
  return impl_->stats();
}
void StoreServer::stop() {
  impl_->stop();
}

std::uint64_t raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return 0;
  if (limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  return limit.rlim_cur;
}

}  // namespace collie::store
