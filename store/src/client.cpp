// The blocking store client: the asynchronous one driven to completion on
// an io_context of its own, in the calling thread, each call with its
// timeout (client.hpp).
#include <algorithm>
#include <mutex>
#include <thread>

#include <asio/io_context.hpp>
#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/store/async_client.hpp>
#include <collie/store/client.hpp>

#include "sealed_channel.hpp"

#include "describe.hpp"

namespace collie::store {

using Clock = std::chrono::steady_clock;

class StoreClient::Impl {
 public:
  Impl(std::string host, std::uint16_t port, ClientOptions options)
      : timeout_(options.timeout), client_(io_, std::move(options)) {
    const auto connect_timeout = client_.options().connect_timeout.value_or(timeout_);
    if (connect_timeout <= std::chrono::milliseconds::zero()) {
      throw ArgumentError("store client: the connect timeout must be positive");
    }
    auto result = std::make_shared<Result<Done>>();
    client_.connect(std::move(host), port, completion(result));
    // The asynchronous client enforces the connect deadline itself (retries
    // and handshake); this is only a backstop against a bug there.
    if (!run_until(result->done, Clock::now() + connect_timeout + std::chrono::seconds(10))) {
      client_.close();
      throw TimeoutError(fmt::format("connecting to the store at {} did not finish within {}",
                                     client_.address(), describe_duration(connect_timeout)));
    }
    if (result->failure) result->failure->raise();
  }

  // Runs one operation to completion or timeout. `start` initiates it with a
  // handler and returns its request id; `what` describes it for errors.
  template <class T, class Start>
  T call(Timeout timeout, Start start, const std::function<std::string()>& what,
         std::string_view timeout_hint = {}) {
    std::lock_guard lock(mutex_);
    const auto limit = timeout.value_or(timeout_);
    if (limit <= std::chrono::milliseconds::zero()) {
      throw ArgumentError(fmt::format("store {}: the timeout must be positive", what()));
    }
    auto result = std::make_shared<Result<T>>();
    const auto id = start(client_, completion(result));
    if (!run_until(result->done, Clock::now() + limit)) {
      client_.abandon(id);
      throw TimeoutError(fmt::format("store at {}: {} timed out after {}{}", client_.address(),
                                     what(), describe_duration(limit), timeout_hint));
    }
    if (result->failure) {
      Failure failure = *result->failure;
      failure.message =
          fmt::format("store at {}: {}: {}", client_.address(), what(), failure.message);
      failure.raise();
    }
    return std::move(result->value);
  }

  std::chrono::milliseconds timeout() const {
    std::lock_guard lock(mutex_);
    return timeout_;
  }
  void set_timeout(std::chrono::milliseconds timeout) {
    if (timeout <= std::chrono::milliseconds::zero()) {
      throw ArgumentError("store client: the default timeout must be positive");
    }
    std::lock_guard lock(mutex_);
    timeout_ = timeout;
  }
  const std::string& address() const { return client_.address(); }
  // The connection's socket (and sealed channel), for the caller to own;
  // the client is closed.
  TorchTunnel release_socket() {
    std::lock_guard lock(mutex_);
    TorchTunnel tunnel;
    tunnel.fd = client_.duplicate_socket();
    tunnel.sealed = client_.release_sealed();
    client_.close();
    io_.poll();  // the handlers of what close() cancelled
    if (tunnel.fd < 0) throw ConnectionError(fmt::format("store at {}: torch tunnel: no connection", client_.address()));
    return tunnel;
  }
  StoreLimits limits() const {
    std::lock_guard lock(mutex_);
    return client_.limits();
  }

 private:
  template <class T>
  struct Result {
    bool done = false;
    std::optional<Failure> failure;
    T value{};
  };

  // The handler writes into shared state, not the caller's stack, so a late
  // call (after a timeout) can never touch a dead frame.
  template <class T>
  static AsyncStoreClient::Handler<T> completion(const std::shared_ptr<Result<T>>& result) {
    return [result](const Failure* failure, T value) {
      result->done = true;
      if (failure != nullptr) {
        result->failure = *failure;
      } else {
        result->value = std::move(value);
      }
    };
  }

  // Runs the io_context until `done` or the deadline; false on timeout.
  // Polls first (options.spin), then sleeps in the reactor.
  bool run_until(const bool& done, Clock::time_point deadline) {
    const auto spin_end = std::min(deadline, Clock::now() + client_.options().spin);
    while (!done && Clock::now() < spin_end) {
      if (io_.stopped()) io_.restart();
      if (io_.poll() == 0) std::this_thread::yield();
    }
    while (!done) {
      if (Clock::now() >= deadline) return false;
      if (io_.stopped()) io_.restart();
      if (io_.run_one_until(deadline) == 0 && io_.stopped() && !done) {
        throw Error("internal: store client: waiting for a reply with no I/O pending");
      }
    }
    return true;
  }

  mutable std::mutex mutex_;
  std::chrono::milliseconds timeout_;
  asio::io_context io_{1};
  AsyncStoreClient client_;
};

StoreClient::StoreClient(std::string host, std::uint16_t port, ClientOptions options)
    : impl_(std::make_unique<Impl>(std::move(host), port, std::move(options))) {}

StoreClient::~StoreClient() = default;

void StoreClient::set(std::string_view key, std::string_view value, Timeout timeout) {
  impl_->call<Done>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.set(key, value, std::move(done)); },
      [&] { return describe_call("set", key); });
}

std::string StoreClient::get(std::string_view key, Timeout timeout) {
  return impl_->call<std::string>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.get(key, std::move(done)); },
      [&] { return describe_call("get", key); }, ": the key was not set in time");
}

std::optional<std::string> StoreClient::try_get(std::string_view key, Timeout timeout) {
  return impl_->call<std::optional<std::string>>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.try_get(key, std::move(done)); },
      [&] { return describe_call("try_get", key); });
}

std::int64_t StoreClient::add(std::string_view key, std::int64_t delta, Timeout timeout) {
  return impl_->call<std::int64_t>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.add(key, delta, std::move(done)); },
      [&] { return describe_call("add", key); });
}

CompareSetResult StoreClient::compare_set(std::string_view key, std::string_view expected,
                                          std::string_view desired, Timeout timeout) {
  return impl_->call<CompareSetResult>(
      timeout,
      [&](AsyncStoreClient& c, auto done) {
        return c.compare_set(key, expected, desired, std::move(done));
      },
      [&] { return describe_call("compare_set", key); });
}

void StoreClient::wait(std::span<const std::string> keys, Timeout timeout) {
  if (keys.empty()) return;
  impl_->call<Done>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.wait(keys, std::move(done)); },
      [&] { return describe_call("wait", keys); }, ": not every key was set in time");
}

bool StoreClient::check(std::span<const std::string> keys, Timeout timeout) {
  return impl_->call<bool>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.check(keys, std::move(done)); },
      [&] { return describe_call("check", keys); });
}

bool StoreClient::delete_key(std::string_view key, Timeout timeout) {
  return impl_->call<bool>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.delete_key(key, std::move(done)); },
      [&] { return describe_call("delete", key); });
}

std::int64_t StoreClient::count_keys(std::string_view prefix, Timeout timeout) {
  return impl_->call<std::int64_t>(
      timeout,
      [&](AsyncStoreClient& c, auto done) { return c.count_keys(prefix, std::move(done)); },
      [&] { return describe_call("count_keys", prefix); });
}

std::vector<std::string> StoreClient::list_keys(std::string_view prefix, Timeout timeout) {
  auto [keys, truncated] = impl_->call<std::pair<std::vector<std::string>, bool>>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.list_keys(prefix, std::move(done)); },
      [&] { return describe_call("list_keys", prefix); });
  if (truncated) {
    throw RequestError(fmt::format(
        "store at {}: list_keys('{}'): more keys match than one reply may carry ({} listed); "
        "use a longer prefix",
        impl_->address(), prefix, keys.size()));
  }
  return std::move(keys);
}

std::vector<std::string> StoreClient::multi_get(std::span<const std::string> keys,
                                                Timeout timeout) {
  if (keys.empty()) return {};
  return impl_->call<std::vector<std::string>>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.multi_get(keys, std::move(done)); },
      [&] { return describe_call("multi_get", keys); }, ": not every key was set in time");
}

void StoreClient::multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                            Timeout timeout) {
  if (keys.size() != values.size()) {
    throw ArgumentError(
        fmt::format("store multi_set: {} keys but {} values", keys.size(), values.size()));
  }
  if (keys.empty()) return;
  impl_->call<Done>(
      timeout,
      [&](AsyncStoreClient& c, auto done) { return c.multi_set(keys, values, std::move(done)); },
      [&] { return describe_call("multi_set", keys); });
}

void StoreClient::append(std::string_view key, std::string_view value, Timeout timeout) {
  impl_->call<Done>(
      timeout,
      [&](AsyncStoreClient& c, auto done) { return c.append(key, value, std::move(done)); },
      [&] { return describe_call("append", key); });
}

void StoreClient::barrier(std::string_view name, std::uint32_t n, Timeout timeout) {
  impl_->call<Done>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.barrier(name, n, std::move(done)); },
      [&] { return fmt::format("barrier('{}', n={})", printable_key(name), n); },
      ": not every caller arrived in time");
}

std::chrono::nanoseconds StoreClient::ping(Timeout timeout) {
  const auto start = Clock::now();
  impl_->call<Done>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.ping(std::move(done)); },
      [] { return std::string("ping"); });
  return Clock::now() - start;
}

TorchTunnel::TorchTunnel() = default;
TorchTunnel::TorchTunnel(TorchTunnel&&) noexcept = default;
TorchTunnel& TorchTunnel::operator=(TorchTunnel&&) noexcept = default;
TorchTunnel::~TorchTunnel() = default;

TorchTunnel StoreClient::into_torch_tunnel(Timeout timeout) {
  impl_->call<Done>(
      timeout, [&](AsyncStoreClient& c, auto done) { return c.torch(std::move(done)); },
      [] { return std::string("torch tunnel"); });
  return impl_->release_socket();
}

std::chrono::milliseconds StoreClient::timeout() const {
  return impl_->timeout();
}
void StoreClient::set_timeout(std::chrono::milliseconds timeout) {
  impl_->set_timeout(timeout);
}
const std::string& StoreClient::address() const {
  return impl_->address();
}
StoreLimits StoreClient::limits() const {
  return impl_->limits();
}

}  // namespace collie::store
