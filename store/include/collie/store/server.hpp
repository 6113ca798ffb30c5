// StoreServer: the rendezvous store's TCP server.
//
//   collie::store::StoreServer server({.port = 0});    // port 0: a free port
//   std::uint16_t port = server.port();                // publish the real one
//
// One Asio event loop on one background thread serves every connection (the
// operations take microseconds; thousands of idle or waiting clients cost
// only their sockets). It listens on IPv6 and IPv4: with no host given, on
// every interface through one dual-stack socket, or on IPv4 alone where the
// system has no IPv6. The listen backlog is the system's maximum
// (net.core.somaxconn), so thousands of clients may connect at once.
//
// Hostile or broken clients affect only their own connection: a malformed,
// truncated, oversized or random request gets an error reply and that
// connection is closed; everyone else is served on. What all clients
// together may cost is bounded too (ServerOptions): memory, connections in
// all and per address, blocked requests, idle connections. A client that
// reaches a limit gets an error that names it, and the server serves on.
// Failed authentication slows its address down, and refusals are logged at
// most once per address per log interval, with a count of the rest.
//
// Thread-safe: port(), addresses(), connections(), stats() and stop() may be
// called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <collie/certificates.hpp>
#include <collie/seal.hpp>
#include <collie/store/store.hpp>

namespace collie::store {

struct ServerOptions {
  // Host name or address to listen on. Empty: every interface (IPv6
  // dual-stack, or IPv4 where IPv6 is absent). A name that resolves to
  // several addresses (localhost) is served on all of them, on one port.
  std::string host;
  // 0 picks a free port; port() tells which.
  std::uint16_t port = 0;
  // Shared secret; empty means no authentication. See PROTOCOL.md.
  std::string token;
  // COLLIE_SEAL (docs/security.md, "The sealed wire"): Auto seals the
  // connections of clients on other hosts, On every one, Off none (a
  // connection its client asks to seal is then refused). Needs a token.
  seal::Mode seal = seal::Mode::Auto;
  // Certificates (docs/security.md, "Certificates"): on a sealed
  // connection the store proves itself with its certificate and requires
  // the client's, which must name the address it comes from. Null: the
  // token alone.
  std::shared_ptr<const seal::Certificates> certificates;
  StoreLimits limits;
  // A connection that has not finished the handshake by then is closed.
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  // Blocked requests (get, wait, multi_get, barrier) one connection may have,
  // and all connections together.
  std::size_t max_waits_per_connection = 4096;
  std::size_t max_waits = 65536;
  // Memory the server may hold for its clients: stored keys and values,
  // blocked requests, and requests and replies on their way. A request that
  // would pass it is refused with an error that says so ("the store is
  // full"), and changes nothing. Values are counted as long as a queued
  // reply still points at them.
  std::size_t max_memory_bytes = std::size_t{128} << 20;
  // Connections served at once, in all and from one address (a host's
  // ranks share its address). One more is told why and closed.
  std::size_t max_connections = 8192;
  std::size_t max_connections_per_address = 2048;
  // A connection that sends nothing this long, with no request blocked, is
  // closed; collie's clients reconnect by themselves before they send on a
  // connection idle half as long. Zero: never.
  std::chrono::milliseconds idle_timeout{std::chrono::minutes(10)};
  // Refusals and failed handshakes are logged at most once per address per
  // interval; the next line says how many were left out.
  std::chrono::milliseconds log_interval{std::chrono::seconds(10)};
  // After handling a request the server thread polls for the next one this
  // long before it sleeps, so a client's next request costs no wake-up.
  // Costs at most this much CPU per burst of requests. Zero sleeps at once.
  std::chrono::microseconds spin{50};
  // Also serve torch.distributed's own TCPStore clients (torch 1.x and
  // 2.x), told apart from collie's by their first bytes (docs/torch.md).
  // torch's protocol has no authentication: a client that speaks it is
  // served without the token, so this is off unless asked for. Its
  // connections have no idle timeout (torch keeps one idle for callbacks);
  // every other limit applies. torch 1.x's second, silent connection is
  // kept past the handshake timeout while its address has a torch client
  // without one (at most one per client): closed, torch 1.13 spins on it.
  bool torch_clients = false;
  // A torch client on loopback is served only if it runs as this server's
  // user (its socket's owner, from /proc/net/tcp): the token does not keep
  // out that user's processes either, since they can read a rank's
  // environment. Clients from other hosts cannot be told apart.
  bool torch_same_user = true;
  // With torch_clients: serve them only on loopback (to this user, as
  // above). A torch client elsewhere reaches the store only through a relay
  // that proves the token (Op::Torch; collie launch runs one per node).
  bool torch_loopback_only = false;
  // What the log says to a torch client refused because torch_clients is
  // off.
  std::string torch_refusal_hint = "The server serves those with --torch";
};

class StoreServer {
 public:
  // Binds and starts serving before it returns. Throws collie::Error naming
  // the host and port if it cannot listen (address in use, unknown host...).
  explicit StoreServer(ServerOptions options = {});
  // Stops the server (see stop()).
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // The port it listens on (the real one when options.port was 0).
  std::uint16_t port() const;

  // Every address it listens on, as "host:port" ("[::]:29500", "0.0.0.0:29500").
  std::vector<std::string> addresses() const;

  // Number of open client connections.
  std::size_t connections() const;

  struct Stats {
    std::size_t connections = 0;    // served (past the connection limits)
    std::size_t keys = 0;           // stored
    std::size_t blocked = 0;        // requests parked until keys are set
    std::size_t memory_bytes = 0;   // counted against max_memory_bytes
    std::size_t auth_failures = 0;  // since the start
    std::size_t refused = 0;        // connections refused by the limits, since the start
    std::size_t evicted = 0;        // silent in their handshake, closed for a newcomer
  };
  // A snapshot, taken on the server's thread.
  Stats stats() const;

  // Stops accepting, closes every connection (clients blocked in a call get
  // a ConnectionError at once) and joins the server thread. Idempotent.
  void stop();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Raises this process's soft limit on open files to its hard limit, so one
// process can serve or hold thousands of connections. Returns the new limit.
std::uint64_t raise_open_file_limit();

}  // namespace collie::store
