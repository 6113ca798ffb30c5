// Which user owns the other end of a TCP connection on this host: read from
// the kernel's socket tables (/proc/net/tcp and tcp6 list every socket of
// this network namespace with its owner's uid), by the peer's address and
// port as this side sees them. For loopback peers: a torch TCPStore client,
// which cannot authenticate, is served only if it runs as the server's user.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include <asio/ip/tcp.hpp>

namespace collie::store {

// The uid that owns the socket at `peer` connected to `local`, or nullopt if
// no such socket is listed (another network namespace; /proc unreadable).
std::optional<uid_t> peer_user(const asio::ip::tcp::endpoint& local,
                               const asio::ip::tcp::endpoint& peer);

// The same from the tables' text (for tests): `tcp` and `tcp6` as the
// files read.
std::optional<uid_t> peer_user_in(const std::string& tcp, const std::string& tcp6,
                                  const asio::ip::tcp::endpoint& local,
                                  const asio::ip::tcp::endpoint& peer);

}  // namespace collie::store
