// torch 1.x's TCPStore client opens a second connection to the store, for
// key watches, and sends nothing on it unless it watches a key. Closing it
// is not harmless: torch 1.13's store thread then polls the closed socket
// in a loop, a busy thread in every rank for the rest of the job. So where
// the server serves torch's clients, a connection silent through its
// handshake time is kept while its address has fewer such connections than
// torch clients plus two: one per torch client, and the two of a torch
// client that has said nothing yet on either (a bare TCPStore sends its
// first query when its program does, which may be later than the
// handshake time). Each holds no buffer (its one-byte read waits); one
// that speaks at last is served as any new connection. When a torch
// client leaves and its address is left with more kept connections than
// clients, the newest are closed a grace period later: time for the
// leaving process's own to close first.
//
// Runs on the server's I/O thread (ServerCore owns it).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

namespace collie::store {

class Session;

class TorchCallbacks {
 public:
  TorchCallbacks(asio::io_context& io, std::chrono::milliseconds grace);

  // A connection from `address` began (or stopped) speaking torch's
  // protocol.
  void client_began(const std::string& address);
  void client_left(const std::string& address);
  // True if `session`, silent through its handshake, is kept as one of its
  // address's silent connections (it must then call itself so:
  // Session::torch_quiet()).
  bool keep(const std::shared_ptr<Session>& session);
  // One of `address`'s kept connections closed, or spoke at last.
  void quiet_ended(const std::string& address);
  // The server is stopping: no more closing later.
  void cancel();

 private:
  struct Address {
    std::size_t clients = 0;
    std::vector<std::weak_ptr<Session>> quiet;  // oldest first
    std::unique_ptr<asio::steady_timer> trim;
  };
  // Silent connections an address may hold beyond one per torch client:
  // a torch 1.x client's two, before it sends its first query.
  static constexpr std::size_t kNotYetSpoken = 2;
  // The address's kept connections still open and still silent.
  static std::size_t prune(Address& a);
  void trim(const std::string& address);

  asio::io_context& io_;
  std::chrono::milliseconds grace_;
  std::unordered_map<std::string, Address> by_address_;
};

}  // namespace collie::store
