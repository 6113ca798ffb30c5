// The store's blocked requests: waits parked on missing keys and woken by
// writes, barriers, a client's cancel and its leaving (key_value_state.hpp).
#include <algorithm>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "key_value_reply.hpp"
#include "key_value_state.hpp"

namespace collie::store {

using wire::ErrorCode;
using wire::Op;
using wire::Request;
using namespace kv;

// --- blocked requests -----------------------------------------------------------

bool KeyValueState::advance(Wait& wait) const {
  auto missing_from = [&](std::size_t start) {
    std::size_t i = start;
    while (i < wait.keys.size() && data_.contains(wait.keys[i]))
      ++i;
    return i;
  };
  wait.next_missing = missing_from(wait.next_missing);
  if (wait.next_missing < wait.keys.size()) return false;
  // Keys found earlier may have been deleted since: check them again.
  wait.next_missing = missing_from(0);
  return wait.next_missing == wait.keys.size();
}

void KeyValueState::park(ReplyTarget& client, const Request& req) {
  auto& mine = waits_by_client_[&client];
  if (mine.contains(req.id) || arrivals_by_client_[&client].contains(req.id)) {
    reply_error(client, req.id, ErrorCode::DuplicateId,
                fmt::format("{}: request id {} is already waiting on this connection",
                            wire::op_name(req.op), req.id));
    return;
  }
  if (parked_by(client) >= max_waits_per_client_) {
    reply_error(client, req.id, ErrorCode::TooManyWaits,
                fmt::format("{}: this connection already has {} blocked requests, the server's "
                            "limit",
                            wire::op_name(req.op), max_waits_per_client_));
    return;
  }
  if (parked_count_ >= max_waits_) {
    reply_error(client, req.id, ErrorCode::TooManyWaits,
                fmt::format("{}: the server already holds {} blocked requests of all its "
                            "clients, its limit (collie store serve --max-waits)",
                            wire::op_name(req.op), max_waits_));
    return;
  }
  const std::size_t cost = wait_cost(req.keys);
  if (!fits(client, req.id,
            fmt::format("{} (blocked until its keys are set)", wire::op_name(req.op)), cost)) {
    return;
  }
  budget_->take(cost);
  ++parked_count_;
  auto wait = std::make_shared<Wait>(
      Wait{&client, req.id, req.op, {req.keys.begin(), req.keys.end()}, 0, cost});
  advance(*wait);
  // At debug level, a job stuck in rendezvous shows which keys it waits for.
  if (log().should_log(spdlog::level::debug)) {
    const std::vector<std::string> keys(req.keys.begin(), req.keys.end());
    log().debug("store: {} waits", describe_call(wire::op_name(req.op), keys));
  }
  mine.emplace(req.id, wait);
  waits_by_key_[wait->keys[wait->next_missing]].push_back(std::move(wait));
}

void KeyValueState::release(Wait& wait) {
  budget_->give(wait.counted);
  wait.counted = 0;
  --parked_count_;
}

void KeyValueState::wake(const Key& key) {
  auto node = waits_by_key_.extract(key);
  if (node.empty()) return;
  for (auto& wait : node.mapped()) {
    if (advance(*wait)) {
      waits_by_client_[wait->client].erase(wait->id);
      release(*wait);
      answer(*wait->client, wait->id, wait->op, wait->keys);
    } else {
      waits_by_key_[wait->keys[wait->next_missing]].push_back(wait);
    }
  }
}

void KeyValueState::unregister(const std::shared_ptr<Wait>& wait) {
  release(*wait);
  auto it = waits_by_key_.find(wait->keys[wait->next_missing]);
  if (it == waits_by_key_.end()) return;
  std::erase(it->second, wait);
  if (it->second.empty()) waits_by_key_.erase(it);
}

void KeyValueState::enter_barrier(ReplyTarget& client, const Request& req) {
  const auto name = req.keys[0];
  const std::uint32_t n = req.number;
  if (n == 0) {
    reply_error(client, req.id, ErrorCode::InvalidArgument,
                fmt::format("barrier {}: n must be at least 1", quoted(name)));
    return;
  }
  auto& mine = arrivals_by_client_[&client];
  if (mine.contains(req.id) || waits_by_client_[&client].contains(req.id)) {
    reply_error(client, req.id, ErrorCode::DuplicateId,
                fmt::format("barrier {}: request id {} is already waiting on this connection",
                            quoted(name), req.id));
    return;
  }
  if (parked_by(client) >= max_waits_per_client_) {
    reply_error(client, req.id, ErrorCode::TooManyWaits,
                fmt::format("barrier {}: this connection already has {} blocked requests, the "
                            "server's limit",
                            quoted(name), max_waits_per_client_));
    return;
  }
  if (parked_count_ >= max_waits_) {
    reply_error(client, req.id, ErrorCode::TooManyWaits,
                fmt::format("barrier {}: the server already holds {} blocked requests of all "
                            "its clients, its limit (collie store serve --max-waits)",
                            quoted(name), max_waits_));
    return;
  }
  auto it = barriers_.find(name);
  const std::size_t cost =
      kArrivalOverhead + 2 * name.size() + (it == barriers_.end() ? kEntryOverhead : 0);
  if (!fits(client, req.id, fmt::format("barrier {}", quoted(name)), cost)) return;
  if (it == barriers_.end()) it = barriers_.emplace(std::string(name), Barrier{n, {}}).first;
  Barrier& barrier = it->second;
  if (barrier.n != n) {
    reply_error(client, req.id, ErrorCode::BarrierMismatch,
                fmt::format("barrier {}: this caller says n={}, but the {} caller(s) waiting "
                            "in it said n={}",
                            quoted(name), n, barrier.arrived.size(), barrier.n));
    return;
  }
  barrier.arrived.emplace_back(&client, req.id);
  if (barrier.arrived.size() < n) {
    budget_->take(kArrivalOverhead + 2 * name.size());
    ++parked_count_;
    mine.emplace(req.id, std::string(name));
    return;
  }
  auto done = std::move(barrier.arrived);
  barriers_.erase(it);
  for (auto [target, id] : done) {
    if (target != &client || id != req.id) {
      arrivals_by_client_[target].erase(id);
      leave_barrier(name);
    }
    reply_ok(*target, id);
  }
}

void KeyValueState::leave_barrier(std::string_view name) {
  budget_->give(kArrivalOverhead + 2 * name.size());
  --parked_count_;
}

void KeyValueState::cancel(ReplyTarget& client, std::uint32_t id) {
  if (auto mine = waits_by_client_.find(&client); mine != waits_by_client_.end()) {
    if (auto it = mine->second.find(id); it != mine->second.end()) {
      unregister(it->second);
      mine->second.erase(it);
      return;
    }
  }
  if (auto mine = arrivals_by_client_.find(&client); mine != arrivals_by_client_.end()) {
    if (auto it = mine->second.find(id); it != mine->second.end()) {
      if (auto b = barriers_.find(it->second); b != barriers_.end()) {
        std::erase(b->second.arrived, std::make_pair(&client, id));
        if (b->second.arrived.empty()) barriers_.erase(b);
      }
      leave_barrier(it->second);
      mine->second.erase(it);
    }
  }
  // Unknown id: the request already completed; its reply is on the way and
  // the client discards it.
}

void KeyValueState::forget(ReplyTarget& client) {
  if (auto mine = waits_by_client_.find(&client); mine != waits_by_client_.end()) {
    for (auto& [id, wait] : mine->second)
      unregister(wait);
    waits_by_client_.erase(mine);
  }
  if (auto mine = arrivals_by_client_.find(&client); mine != arrivals_by_client_.end()) {
    for (auto& [id, name] : mine->second) {
      if (auto b = barriers_.find(name); b != barriers_.end()) {
        std::erase(b->second.arrived, std::make_pair(&client, id));
        if (b->second.arrived.empty()) barriers_.erase(b);
      }
      leave_barrier(name);
    }
    arrivals_by_client_.erase(mine);
  }
}

}  // namespace collie::store
