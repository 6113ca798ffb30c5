// Helpers for tests that need a running store.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <collie/store/client.hpp>
#include <collie/store/server.hpp>

#include "support/eventually.hpp"

namespace collie::test {

// A server on 127.0.0.1 and a free port, with clients made to match.
struct StoreFixture {
  explicit StoreFixture(store::ServerOptions options = loopback()) : server(options) {}

  static store::ServerOptions loopback() {
    store::ServerOptions options;
    options.host = "127.0.0.1";
    return options;
  }

  std::unique_ptr<store::StoreClient> client(store::ClientOptions options = {}) const {
    if (options.timeout == std::chrono::seconds(300)) options.timeout = std::chrono::seconds(30);
    return std::make_unique<store::StoreClient>("127.0.0.1", server.port(), options);
  }

  std::shared_ptr<store::StoreClient> shared_client() const { return client(); }

  // Waits until `n` requests are parked at the server (a get, wait or
  // barrier that waits for another client): the event a test's writer
  // waits for before it writes. False if they never are.
  bool blocked(std::size_t n) const {
    return eventually([&] { return server.stats().blocked >= n; });
  }

  store::StoreServer server;
};

// A port that was free a moment ago. Only for the one test that must start a
// client before its server: everything else binds port 0.
std::uint16_t momentarily_free_port();

// A loopback port that refuses every connection and that no other process
// can take while this lives: bound, never listening. For a client that must
// find no server (a port freed by a stopped server may be bound again at
// once by a test running beside, whose server would answer instead).
class RefusingPort {
 public:
  RefusingPort();
  ~RefusingPort();
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;
  std::uint16_t port() const { return port_; }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

// True if this machine can open an IPv6 socket on ::1.
bool ipv6_loopback_available();

}  // namespace collie::test
