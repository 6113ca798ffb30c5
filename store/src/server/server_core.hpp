// The store server without its public face (StoreServer, server.hpp): the
// listeners, admission of connections against the limits (in all, per
// address, making way for strangers stuck in their handshake), the data
// (KeyValueState), the memory budget and giving memory back, the log and
// the authentication throttle the sessions share, and stats. Everything
// here runs on the server's one I/O thread, but for the calls of the public
// face (port, addresses, connections, stats, stop).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <collie/store/server.hpp>

#include "../key_value_state.hpp"
#include "address_log.hpp"
#include "auth_throttle.hpp"
#include "torch_callbacks.hpp"

namespace collie::store {

class Session;

class ServerCore {
 public:
  using Clock = std::chrono::steady_clock;

  explicit ServerCore(ServerOptions options);
  ~ServerCore();

  std::uint16_t port() const { return port_; }
  const std::vector<std::string>& addresses() const { return addresses_; }
  std::size_t connections() const { return connections_.load(); }
  StoreServer::Stats stats();
  void stop();

  // ---- for the sessions ----
  const ServerOptions& options() const { return options_; }
  KeyValueState& state() { return state_; }
  MemoryBudget& budget() { return budget_; }
  AddressLog& address_log() { return address_log_; }
  AuthThrottle& throttle() { return throttle_; }
  TorchCallbacks& torch_callbacks() { return torch_callbacks_; }
  void count_auth_failure() { ++auth_failures_; }
  // Gives memory the clients no longer hold back to the system once enough
  // was freed: the allocator keeps freed small blocks (a hostile client's
  // parked waits) otherwise, and the process would stay as large as its peak.
  void maybe_trim();
  // A session closed: it leaves the counts (and may be destroyed here).
  void remove(const std::shared_ptr<Session>& session);

 private:
  std::error_code try_listen(asio::ip::tcp::endpoint endpoint, bool v6_only);
  void accept(asio::ip::tcp::acceptor& acceptor);
  void admit(asio::ip::tcp::socket socket);
  bool make_way(std::deque<std::weak_ptr<Session>>& queue);
  void run();
  void shutdown();

  ServerOptions options_;
  asio::io_context io_{1};
  // Before everything that holds values or buffers: they give back to it.
  MemoryBudget budget_;
  AddressLog address_log_;
  AuthThrottle throttle_;
  TorchCallbacks torch_callbacks_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::unique_ptr<asio::steady_timer>> accept_retry_;
  std::set<std::shared_ptr<Session>> sessions_;
  std::unordered_map<std::string, std::size_t> per_address_;
  // Per address, the connections still in their handshake, oldest first.
  std::unordered_map<std::string, std::deque<std::weak_ptr<Session>>> handshaking_;
  std::deque<std::weak_ptr<Session>> handshaking_all_;  // every address
  std::size_t evicted_ = 0;
  std::size_t served_ = 0;    // sessions past the limits
  std::size_t refusing_ = 0;  // sessions being told they are over a limit
  std::size_t refused_ = 0;
  std::size_t auth_failures_ = 0;
  std::size_t high_water_ = 0;  // of the budget, since the last trim
  KeyValueState state_;
  std::uint16_t port_ = 0;
  std::vector<std::string> addresses_;
  std::atomic<std::size_t> connections_{0};
  std::thread thread_;
  std::once_flag stopped_;
};

}  // namespace collie::store
