// collie's Store interface over torch's c10d::Store (torch_store.hpp).
// torch's store has no per-call timeout on get (a wait with one comes
// first), no listing and no server-side barrier (made of add and wait
// here). Calls are serialised: a torch store client is one socket.
#include "torch_store.hpp"
#include "torch_keys.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <optional>
#include <span>
#include <string_view>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <collie/deadline.hpp>
#include <collie/environment.hpp>
#include <collie/error.hpp>
#include <collie/store/client.hpp>
#include <collie/store/prefix_store.hpp>

namespace collie_torch {

namespace {

class TorchStore final : public collie::store::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(std::string_view key, std::string_view value, collie::store::Timeout) override {
    call("set", key, [&] { store_->set(std::string(key), bytes(value)); });
  }
  std::string get(std::string_view key, collie::store::Timeout timeout) override {
    std::string out;
    call("get", key, [&] {
      store_->wait({std::string(key)}, limit(timeout));
      out = text(store_->get(std::string(key)));
    });
    return out;
  }
  std::optional<std::string> try_get(std::string_view key, collie::store::Timeout) override {
    std::optional<std::string> out;
    call("get", key, [&] {
      if (store_->check({std::string(key)})) out = text(store_->get(std::string(key)));
    });
    return out;
  }
  std::int64_t add(std::string_view key, std::int64_t delta, collie::store::Timeout) override {
    std::int64_t out = 0;
    call("add", key, [&] { out = store_->add(std::string(key), delta); });
    return out;
  }
  collie::store::CompareSetResult compare_set(std::string_view key, std::string_view expected,
                                              std::string_view desired,
                                              collie::store::Timeout) override {
    collie::store::CompareSetResult out;
    call("compare_set", key, [&] {
      const std::string now = text(
          store_->compareSet(std::string(key), bytes(expected), bytes(desired)));
      out.swapped = now == desired;  // torch answers with the value after the call
      if (now == desired || store_->check({std::string(key)})) out.current = now;
    });
    return out;
  }
  void wait(std::span<const std::string> keys, collie::store::Timeout timeout) override {
    call("wait", keys.empty() ? std::string_view() : std::string_view(keys.front()), [&] {
      store_->wait(std::vector<std::string>(keys.begin(), keys.end()), limit(timeout));
    });
  }
  bool check(std::span<const std::string> keys, collie::store::Timeout) override {
    bool out = false;
    call("check", keys.empty() ? std::string_view() : std::string_view(keys.front()), [&] {
      out = store_->check(std::vector<std::string>(keys.begin(), keys.end()));
    });
    return out;
  }
  bool delete_key(std::string_view key, collie::store::Timeout) override {
    bool out = false;
    call("delete_key", key, [&] { out = store_->deleteKey(std::string(key)); });
    return out;
  }
  std::int64_t count_keys(std::string_view prefix, collie::store::Timeout) override {
    if (!prefix.empty()) unsupported("counting keys by prefix");
    std::int64_t out = 0;
    call("num_keys", prefix, [&] { out = store_->getNumKeys(); });
    return out;
  }
  std::vector<std::string> list_keys(std::string_view, collie::store::Timeout) override {
    unsupported("listing keys");
  }
  std::vector<std::string> multi_get(std::span<const std::string> keys,
                                     collie::store::Timeout timeout) override {
    wait(keys, timeout);
    std::vector<std::string> out;
    for (const auto& k : keys)
      call("get", k, [&] { out.push_back(text(store_->get(k))); });
    return out;
  }
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                 collie::store::Timeout timeout) override {
    if (keys.size() != values.size())
      throw collie::ArgumentError("multi_set: as many values as keys, please");
    for (std::size_t i = 0; i < keys.size(); ++i)
      set(keys[i], values[i], timeout);
  }
  void append(std::string_view key, std::string_view value, collie::store::Timeout) override {
    // compare_set until no other client appended between the read and the write.
    for (;;) {
      const std::string before = try_get(key, {}).value_or("");
      const std::string after = before + std::string(value);
      std::string now;
      call("append", key, [&] {
        now = text(store_->compareSet(std::string(key), bytes(before), bytes(after)));
      });
      if (now == after) return;
    }
  }
  // n callers: each counts itself in; the n-th of each round opens it.
  void barrier(std::string_view name, std::uint32_t n, collie::store::Timeout timeout) override {
    const std::int64_t arrived = add(keys::barrier_arrived(name), 1, timeout);
    const std::int64_t round = (arrived - 1) / n;
    const std::string open = keys::barrier_open(name, round);
    if (arrived % n == 0) set(open, "1", timeout);
    const std::string keys[] = {open};
    wait(keys, timeout);
  }
  std::chrono::milliseconds timeout() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(store_->getTimeout());
  }

 private:
  static std::vector<std::uint8_t> bytes(std::string_view s) {
    return std::vector<std::uint8_t>(s.begin(), s.end());
  }
  static std::string text(const std::vector<std::uint8_t>& v) {
    return std::string(v.begin(), v.end());
  }
  std::chrono::milliseconds limit(collie::store::Timeout t) const {
    return t.value_or(std::chrono::duration_cast<std::chrono::milliseconds>(store_->getTimeout()));
  }
  [[noreturn]] static void unsupported(const char* what) {
    throw collie::Error(std::string("torch's store does not support ") + what);
  }
  // Runs one store call; torch's errors become collie's (a timeout is a
  // TimeoutError, anything else a ConnectionError), naming the key.
  template <class F>
  void call(const char* op, std::string_view key, F&& f) {
    std::lock_guard lock(mu_);
    try {
      f();
    } catch (const collie::Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const std::string message =
          std::string("torch's store: ") + op + " '" + std::string(key) + "': " + first_line(what);
      if (what.find("imeout") != std::string::npos || what.find("timed out") != std::string::npos)
        throw collie::TimeoutError(message);
      throw collie::ConnectionError(message);
    }
  }
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  std::mutex mu_;
  c10::intrusive_ptr<c10d::Store> store_;
};

// PrefixStore keeps its prefix protected; a member pointer taken in a
// derived class reads it.
struct PrefixOf : c10d::PrefixStore {
  static const std::string& of(const c10d::PrefixStore& s) { return s.*(&PrefixOf::prefix_); }
};

}  // namespace

std::shared_ptr<collie::store::Store> adapt(c10::intrusive_ptr<c10d::Store> store) {
  return std::make_shared<TorchStore>(std::move(store));
}

std::shared_ptr<collie::store::Store> collie_served(const StoreIdentity& id,
                                                   std::chrono::milliseconds timeout) {
  const auto hosted = collie::environment::get(collie::environment::kStoreHosted);
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (hosted != "1" || addr == nullptr || port == nullptr ||
      id.host.empty() || id.host != addr || std::to_string(id.port) != port)
    return nullptr;
  collie::store::ClientOptions options;
  options.token = collie::store::token_from_environment();
  options.seal = collie::store::seal_from_environment();
  options.certificates = collie::store::certificates_from_environment();
  if (timeout.count() > 0) options.timeout = timeout;
  std::shared_ptr<collie::store::Store> client = std::make_shared<collie::store::StoreClient>(
      id.host, static_cast<std::uint16_t>(id.port), options);
  if (id.prefix.empty()) return client;
  return std::make_shared<collie::store::PrefixStore>(client, id.prefix);
}

bool hosted_by_rank_zero(const StoreIdentity& id) {
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if ((agent != nullptr && std::string(agent) == "True") ||
      collie::environment::get(collie::environment::kStoreHosted) == "1" || id.host.empty())
    return false;
  // torch 1.13 names the world's namespace "default_pg"; torch 2 "0".
  return id.prefix.rfind("default_pg", 0) == 0 || id.prefix == "0" ||
         id.prefix.rfind("0/", 0) == 0;
}

namespace {

using Clock = std::chrono::steady_clock;

// How long a new connection to the port must stay open, once the old store
// closed the watch's, to be a store made again there rather than the old
// one's listening socket in its last moments (closed microseconds after its
// connections, resetting what waits in its backlog).
constexpr auto kNewStoreAfter = std::chrono::milliseconds(250);

// A connection to the store's address, made by `deadline`; -1 if refused,
// unreachable or not made in time.
int connect_by(const StoreIdentity& id, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(id.host.c_str(), std::to_string(id.port).c_str(), &hints, &found) != 0)
    return -1;
  int fd = -1;
  for (auto* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    bool made = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!made && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t size = sizeof error;
      made = ::poll(&p, 1, collie::poll_ms_until(deadline)) == 1 &&
             ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
    }
    if (!made) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return fd;
}

// Whether the server closed `fd` (or said something, which a TCPStore
// never does unasked) by `deadline`.
bool closed_by(int fd, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, collie::poll_ms_until(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return false;
    char byte = 0;
    if (n < 0 || ::recv(fd, &byte, 1, MSG_DONTWAIT) != -1 || (errno != EAGAIN && errno != EINTR))
      return true;
  }
}

}  // namespace

StoreCloseWatch::StoreCloseWatch(const StoreIdentity& id)
    : id_(id), fd_(connect_by(id, Clock::now() + std::chrono::seconds(5))) {}

StoreCloseWatch::~StoreCloseWatch() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreCloseWatch::wait(std::chrono::milliseconds limit) {
  // (Not torch's client: torch 2 prints a stack for each query the closed
  // store fails.)
  if (fd_ < 0) return;
  const auto deadline = Clock::now() + limit;
  const bool closed = closed_by(fd_, deadline);
  ::close(fd_);
  fd_ = -1;
  if (!closed) return;
  while (Clock::now() < deadline) {
    const int fd = connect_by(id_, deadline);
    if (fd < 0) return;  // refused: the old store is gone
    const bool reset = closed_by(fd, std::min(deadline, Clock::now() + kNewStoreAfter));
    ::close(fd);
    if (!reset) return;  // open: a store made again there
  }
}

std::pair<std::string, c10::intrusive_ptr<c10d::Store>> outer_prefix(
    const c10::intrusive_ptr<c10d::Store>& store) {
  if (auto* p = dynamic_cast<c10d::PrefixStore*>(store.get()))
    return {PrefixOf::of(*p), p->getUnderlyingStore()};
  return {};
}

StoreIdentity identify(c10::intrusive_ptr<c10d::Store> store) {
  StoreIdentity id;
  std::string prefixes;
  for (int depth = 0; store && depth < 64; ++depth) {
    if (auto* p = dynamic_cast<c10d::PrefixStore*>(store.get())) {
      prefixes = PrefixOf::of(*p) + (prefixes.empty() ? "" : "/" + prefixes);
      store = p->getUnderlyingStore();
      continue;
    }
    if (auto* t = dynamic_cast<c10d::TCPStore*>(store.get())) {
      id.host = t->getHost();
      id.port = t->getPort();
      id.name = t->getHost() + ":" + std::to_string(t->getPort());
    } else if (auto* f = dynamic_cast<c10d::FileStore*>(store.get())) {
      // (Its path tells two file stores apart: a group made again on a new
      // file starts afresh, whenever the old one's ranks dropped it.)
      id.name = "file:" + f->getPath();
    } else {
      id.name = "store";
    }
    break;
  }
  id.name += " " + prefixes;
  id.prefix = prefixes;
  return id;
}

}  // namespace collie_torch
