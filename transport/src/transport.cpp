#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/transport/transport.hpp>

namespace collie::transport {

void check_peer(int rank, int world_size, int peer, std::string_view op) {
  if (peer >= 0 && peer < world_size) return;
  throw Error(fmt::format("rank {}: {} rank {}: rank {} is not in the group (ranks 0 to {})", rank,
                          op, peer, peer, world_size - 1));
}

}  // namespace collie::transport
