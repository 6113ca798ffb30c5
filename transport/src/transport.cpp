#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/transport/transport.hpp>

#include "request_failure.hpp"

namespace collie::transport {

void check_peer(int rank, int world_size, int peer, std::string_view op) {
  if (peer >= 0 && peer < world_size) return;
  throw Error(fmt::format("rank {}: {} rank {}: rank {} is not in the group (ranks 0 to {})", rank,
                          op, peer, peer, world_size - 1));
}

void throw_failure(ErrorKind kind, const std::string& message, bool interrupted) {
  switch (kind) {
    case ErrorKind::Timeout:
      if (interrupted) throw InterruptedError(message);
      throw TimeoutError(message);
    case ErrorKind::Protocol:
      throw ProtocolError(message);
    case ErrorKind::Request:
      throw RequestError(message);
    default:
      throw ConnectionError(message);
  }
}

std::string plural_bytes(std::size_t n) {
  return fmt::format("{} byte{}", n, n == 1 ? "" : "s");
}

}  // namespace collie::transport
