// "host:port" text, read and written the same way everywhere in collie
// (tcp:// init, the CLI's --addr, store and peer addresses in messages).
// It lives in the base layer, beside error.hpp and log.hpp, so that every
// layer can use it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace collie {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

// "host:port" or "[ipv6]:port", split. nullopt if `text` is neither form or
// the port is not a number in 0..65535.
std::optional<HostPort> split_host_port(std::string_view text);

// The inverse: "10.0.0.4:29500", "[fd00::4]:29500" (brackets when the host
// holds a ':').
std::string join_host_port(std::string_view host, std::uint16_t port);

// True for a name or address that reaches this host only: "localhost",
// "::1", 127.x.x.x. (A name is not resolved.)
bool is_loopback_host(std::string_view host);

// Turns on TCP keep-alive on a connected socket: probes after `idle_s`
// seconds without traffic, `count` of them `interval_s` apart; the
// connection fails (ETIMEDOUT) when none is answered. Best effort.
void set_keep_alive(int fd, int idle_s, int interval_s, int count);

// The same for a socket endpoint (anything with address().to_string() and
// port(), such as Asio's): "10.0.0.4:41234".
template <class Endpoint>
std::string endpoint_text(const Endpoint& endpoint) {
  return join_host_port(endpoint.address().to_string(), endpoint.port());
}

}  // namespace collie
