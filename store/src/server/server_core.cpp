// The store server's core (server_core.hpp): listening on every address
// asked for, admitting connections against the limits, and the calls of
// the public face answered from the I/O thread.
#include "server_core.hpp"

#include <fstream>
#include <future>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <asio/ip/v6_only.hpp>
#include <asio/post.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>

#include "session.hpp"

namespace collie::store {

using asio::ip::tcp;

namespace {

// Sessions over a connection limit that are told so (after the client's
// hello) at once; past this many, more are closed without a word.
constexpr std::size_t kMaxRefusing = 64;
// A connection still in its handshake after this long may be closed to make
// way for a newcomer at a connection limit (make_way()).
constexpr auto kStuckInHandshake = std::chrono::seconds(1);

// The kernel's cap on a listen backlog; asking for it gets the most the
// system allows, so a burst of thousands of connects is not dropped.
int system_max_backlog() {
  std::ifstream in("/proc/sys/net/core/somaxconn");
  int value = 0;
  if (in >> value && value > 0) return value;
  return asio::socket_base::max_listen_connections;
}

}  // namespace

void ServerCore::maybe_trim() {
#if defined(__GLIBC__)
  const std::size_t used = budget_.used();
  high_water_ = std::max(high_water_, used);
  if (high_water_ > used + (std::size_t{16} << 20)) {
    malloc_trim(0);
    high_water_ = used;
  }
#endif
}

ServerCore::ServerCore(ServerOptions options)
    : options_(std::move(options)),
      budget_(options_.max_memory_bytes),
      address_log_(io_, options_.log_interval),
      torch_callbacks_(io_, options_.handshake_timeout),
      state_(options_.limits, options_.max_waits_per_connection, &budget_, options_.max_waits) {
  if (options_.limits.max_message_bytes < wire::kMinMessageBytes) {
    throw ArgumentError(
        fmt::format("store server: max_message_bytes must be at least {}", wire::kMinMessageBytes));
  }
  port_ = options_.port;
  std::string errors;
  if (options_.host.empty()) {
    // One dual-stack socket serves IPv6 and IPv4; without IPv6, IPv4 alone.
    auto ec = try_listen(tcp::endpoint(asio::ip::address_v6::any(), port_), false);
    if (ec) {
      log().info("store: IPv6 is not available ({}); listening on IPv4 only", ec.message());
      ec = try_listen(tcp::endpoint(asio::ip::address_v4::any(), port_), false);
    }
    if (ec) errors = ec.message();
  } else {
    tcp::resolver resolver(io_);
    std::error_code ec;
    const auto results =
        resolver.resolve(options_.host, std::to_string(options_.port), tcp::resolver::passive, ec);
    if (ec) {
      throw Error(fmt::format("store: cannot listen on '{}': the host does not resolve ({})",
                              options_.host, ec.message()));
    }
    std::set<tcp::endpoint> seen;
    for (const auto& entry : results) {
      auto endpoint = entry.endpoint();
      endpoint.port(port_);
      if (!seen.insert(endpoint).second) continue;
      if (auto error = try_listen(endpoint, true)) {
        errors += fmt::format("{}{}: {}", errors.empty() ? "" : "; ", endpoint_text(endpoint),
                              error.message());
      }
    }
  }
  if (acceptors_.empty()) {
    throw Error(fmt::format("store: cannot listen on {}:{}: {}",
                            options_.host.empty() ? "*" : options_.host, options_.port, errors));
  }
  if (!errors.empty()) log().info("store: some addresses could not be used: {}", errors);
  for (auto& acceptor : acceptors_)
    accept(*acceptor);
  thread_ = std::thread([this] {
    while (true) {
      try {
        run();
        return;
      } catch (const std::exception& e) {
        log().error("store: unexpected error in the server loop: {}", e.what());
      }
    }
  });
}

void ServerCore::run() {
  // Poll while requests keep coming (options.spin), sleep in the reactor
  // when they stop: a busy client pays no wake-up per request, an idle
  // server burns no CPU.
  auto last_work = Clock::now();
  while (!io_.stopped()) {
    if (io_.poll() > 0) {
      last_work = Clock::now();
    } else if (Clock::now() - last_work < options_.spin) {
      std::this_thread::yield();
    } else if (io_.run_one() > 0) {
      last_work = Clock::now();
    }
  }
}

ServerCore::~ServerCore() {
  stop();
}

std::error_code ServerCore::try_listen(tcp::endpoint endpoint, bool v6_only) {
  auto acceptor = std::make_unique<tcp::acceptor>(io_);
  std::error_code ec;
  acceptor->open(endpoint.protocol(), ec);
  if (!ec) acceptor->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && endpoint.address().is_v6()) acceptor->set_option(asio::ip::v6_only(v6_only), ec);
  if (!ec) acceptor->bind(endpoint, ec);
  if (!ec) acceptor->listen(system_max_backlog(), ec);
  if (ec) return ec;
  const auto local = acceptor->local_endpoint(ec);
  if (ec) return ec;
  port_ = local.port();  // the real port, also for the next address when it was 0
  addresses_.push_back(endpoint_text(local));
  acceptors_.push_back(std::move(acceptor));
  accept_retry_.push_back(std::make_unique<asio::steady_timer>(io_));
  return {};
}

void ServerCore::accept(tcp::acceptor& acceptor) {
  acceptor.async_accept([this, &acceptor](std::error_code ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors, typically: wait a little instead of spinning.
      log().warn(
          "store: accepting a connection failed: {} (raise the open-file limit, ulimit -n, "
          "if this is 'too many open files'); retrying in 100 ms",
          ec.message());
      std::size_t index = 0;
      while (acceptors_[index].get() != &acceptor)
        ++index;
      accept_retry_[index]->expires_after(std::chrono::milliseconds(100));
      accept_retry_[index]->async_wait([this, &acceptor](std::error_code wait_ec) {
        if (!wait_ec) accept(acceptor);
      });
      return;
    }
    admit(std::move(socket));
    accept(acceptor);
  });
}

void ServerCore::admit(tcp::socket socket) {
  std::error_code ec;
  const auto remote = socket.remote_endpoint(ec);
  if (ec) return;  // gone already
  auto ip = remote.address();
  if (ip.is_v6() && ip.to_v6().is_v4_mapped()) {
    ip = asio::ip::make_address_v4(asio::ip::v4_mapped, ip.to_v6());
  }
  const std::string address = ip.to_string();
  std::optional<wire::HelloStatus> refusal;
  auto at_address_limit = [&] {
    const auto from_here = per_address_.find(address);
    return from_here != per_address_.end() &&
           from_here->second >= options_.max_connections_per_address;
  };
  // At a limit, a newcomer takes the place of a stranger stuck in its handshake.
  if (served_ >= options_.max_connections) make_way(handshaking_all_);
  if (served_ >= options_.max_connections) {
    refusal = wire::HelloStatus::TooManyConnections;
  } else if (at_address_limit()) {
    if (auto h = handshaking_.find(address); h != handshaking_.end()) make_way(h->second);
    if (at_address_limit()) refusal = wire::HelloStatus::TooManyFromAddress;
  }
  if (refusal) {
    ++refused_;
    if (refusing_ >= kMaxRefusing) {
      address_log_.log(spdlog::level::warn, address,
                       fmt::format("store: closed a connection from {} at once: {}", address,
                                   *refusal == wire::HelloStatus::TooManyConnections
                                       ? "the server is at its connection limit"
                                       : "that address is at its connection limit"));
      return;  // the socket closes here
    }
  }
  socket.set_option(tcp::no_delay(true), ec);
  // A client whose host is lost frees what it holds within about 20 s.
  set_keep_alive(socket.native_handle(), 10, 2, 5);
  auto session = std::make_shared<Session>(*this, std::move(socket), address, refusal);
  sessions_.insert(session);
  if (!refusal) {
    handshaking_[address].push_back(session);
    handshaking_all_.push_back(session);
  }
  if (refusal) {
    ++refusing_;
  } else {
    ++served_;
    ++per_address_[address];
  }
  connections_.store(served_);
  session->start();
}

// Strangers cannot hold a connection limit against real clients by keeping
// connections open in the handshake: at a limit, the oldest connection still
// in its handshake after kStuckInHandshake is closed to make way for the
// newcomer. A real client's handshake takes one round trip, so only a
// client that says nothing (or stops half-way) is ever chosen. Returns
// false if there was none to close.
bool ServerCore::make_way(std::deque<std::weak_ptr<Session>>& queue) {
  const auto now = Clock::now();
  while (!queue.empty()) {
    const auto oldest = queue.front().lock();
    if (!oldest || !oldest->in_handshake()) {
      queue.pop_front();
      continue;
    }
    if (now - oldest->accepted_at() < kStuckInHandshake) return false;
    queue.pop_front();
    ++evicted_;
    oldest->close(spdlog::level::warn,
                  fmt::format("closed to make way for a new connection: at a connection limit, "
                              "and it had not finished its handshake after {}",
                              describe_duration(now - oldest->accepted_at())));
    return true;
  }
  return false;
}

void ServerCore::remove(const std::shared_ptr<Session>& session) {
  if (sessions_.erase(session) == 0) return;
  if (session->refusing()) {
    --refusing_;
  } else {
    --served_;
    auto it = per_address_.find(session->address());
    if (it != per_address_.end() && --it->second == 0) per_address_.erase(it);
    // Forget connections past their handshake, from the front of the queues.
    if (auto h = handshaking_.find(session->address()); h != handshaking_.end()) {
      auto& q = h->second;
      while (!q.empty()) {
        const auto front = q.front().lock();
        if (front && front != session && front->in_handshake()) break;
        q.pop_front();
      }
      if (q.empty()) handshaking_.erase(h);
    }
    while (!handshaking_all_.empty()) {
      const auto front = handshaking_all_.front().lock();
      if (front && front != session && front->in_handshake()) break;
      handshaking_all_.pop_front();
    }
  }
  connections_.store(served_);
}

StoreServer::Stats ServerCore::stats() {
  std::promise<StoreServer::Stats> promise;
  auto future = promise.get_future();
  asio::post(io_, [this, &promise] {
    StoreServer::Stats s;
    s.connections = served_;
    s.keys = state_.keys();
    s.blocked = state_.parked();
    s.memory_bytes = budget_.used();
    s.auth_failures = auth_failures_;
    s.refused = refused_;
    s.evicted = evicted_;
    promise.set_value(s);
  });
  if (future.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    throw Error("store: the server thread did not answer within 30 s (is it stopped?)");
  }
  return future.get();
}

void ServerCore::shutdown() {
  std::error_code ignored;
  for (auto& acceptor : acceptors_)
    acceptor->close(ignored);
  for (auto& timer : accept_retry_)
    timer->cancel();
  const auto sessions = sessions_;
  for (const auto& session : sessions)
    session->close(spdlog::level::debug, "the server is stopping");
  torch_callbacks_.cancel();
  address_log_.cancel();
  io_.stop();
}

void ServerCore::stop() {
  std::call_once(stopped_, [this] {
    if (!thread_.joinable()) return;
    asio::post(io_, [this] { shutdown(); });
    thread_.join();
  });
}

}  // namespace collie::store
