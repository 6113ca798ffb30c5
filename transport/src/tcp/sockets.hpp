// What every peer connection's socket gets, on either side of the handshake.
#pragma once

#include <string>

#include <asio/ip/tcp.hpp>

namespace collie::transport::tcp {

// The settings of docs/transport.md: TCP_NODELAY, keep-alive probes (30 s
// idle, 3 probes 5 s apart), close-on-exec, non-blocking. Asio opens
// sockets without close-on-exec, so it is set here, right after: a child
// process a rank starts must not hold a peer's connection open (a dead
// rank's end-of-stream would never come).
void tune(asio::ip::tcp::socket& socket);

// "10.0.0.4:41234", "[fd00::4]:41234"
std::string endpoint_text(const asio::ip::tcp::endpoint& endpoint);

}  // namespace collie::transport::tcp
