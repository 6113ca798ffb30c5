// torch's silent connections, at most one per torch client of an address
// and two more (torch_callbacks.hpp).
#include "torch_callbacks.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "session.hpp"

namespace collie::store {

TorchCallbacks::TorchCallbacks(asio::io_context& io, std::chrono::milliseconds grace)
    : io_(io), grace_(grace) {}

std::size_t TorchCallbacks::prune(Address& a) {
  std::erase_if(a.quiet, [](const std::weak_ptr<Session>& w) {
    const auto s = w.lock();
    return !s || !s->torch_quiet();
  });
  return a.quiet.size();
}

void TorchCallbacks::client_began(const std::string& address) {
  ++by_address_[address].clients;
}

void TorchCallbacks::client_left(const std::string& address) {
  const auto it = by_address_.find(address);
  if (it == by_address_.end()) return;
  auto& a = it->second;
  if (a.clients > 0) --a.clients;
  if (prune(a) <= a.clients) {
    if (a.clients == 0) by_address_.erase(it);  // a waiting trim has nothing to do
    return;
  }
  if (!a.trim) a.trim = std::make_unique<asio::steady_timer>(io_);
  a.trim->expires_after(grace_);
  a.trim->async_wait([this, address](std::error_code ec) {
    if (!ec) trim(address);
  });
}

bool TorchCallbacks::keep(const std::shared_ptr<Session>& session) {
  auto& a = by_address_[session->address()];
  if (prune(a) >= a.clients + kNotYetSpoken) return false;
  a.quiet.push_back(session);
  return true;
}

void TorchCallbacks::quiet_ended(const std::string& address) {
  const auto it = by_address_.find(address);
  if (it != by_address_.end() && it->second.clients == 0 && prune(it->second) == 0)
    by_address_.erase(it);
}

void TorchCallbacks::trim(const std::string& address) {
  const auto it = by_address_.find(address);
  if (it == by_address_.end()) return;
  auto& a = it->second;
  std::vector<std::shared_ptr<Session>> excess;
  for (std::size_t n = prune(a); n > a.clients; --n) {
    excess.push_back(a.quiet.back().lock());
    a.quiet.pop_back();
  }
  const std::size_t clients = a.clients;
  if (clients == 0 && a.quiet.empty()) by_address_.erase(it);  // `a` is gone
  for (const auto& s : excess) {
    s->close(spdlog::level::debug,
             fmt::format("torch's silent connection, kept while its address had a torch client "
                         "for it; {} has {} torch client{} now",
                         address, clients, clients == 1 ? "" : "s"));
  }
}

void TorchCallbacks::cancel() {
  by_address_.clear();
}

}  // namespace collie::store
