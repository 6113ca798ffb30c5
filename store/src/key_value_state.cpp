// The store's data and its blocked requests, without I/O
// (key_value_state.hpp).
#include "key_value_state.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "describe.hpp"

namespace collie::store {

using wire::ErrorCode;
using wire::Op;
using wire::Request;

namespace {

std::string quoted(std::string_view key) {
  return fmt::format("'{}'", printable_key(key));
}

// What the budget counts beyond the bytes themselves: a map node with its
// key's string, a parked wait's bookkeeping, a barrier arrival.
constexpr std::size_t kEntryOverhead = 96;
constexpr std::size_t kWaitOverhead = 192;
constexpr std::size_t kWaitKeyOverhead = 96;
constexpr std::size_t kArrivalOverhead = 128;
// Values at least this large go out by reference, not copied into the reply.
constexpr std::size_t kShareValuesFrom = 4096;

std::size_t wait_cost(std::span<const std::string_view> keys) {
  std::size_t n = kWaitOverhead;
  for (auto key : keys)
    n += 2 * key.size() + kWaitKeyOverhead;  // the wait's copy and the index's
  return n;
}

// Builds a reply whose large values are pieces pointing into the stored
// values, and whose other bytes are owned.
class ReplyBuilder {
 public:
  ReplyBuilder(wire::ReplyStatus status, std::uint32_t id) {
    current_.resize(wire::kFrameHeaderBytes);
    writer().u8(static_cast<std::uint8_t>(status));
    writer().u32(id);
  }
  wire::Writer writer() { return wire::Writer(current_); }
  void value(const std::shared_ptr<StoredValue>& v) {
    if (v->text.size() < kShareValuesFrom) return writer().bytes(v->text);
    writer().u32(static_cast<std::uint32_t>(v->text.size()));
    body_ += current_.size();
    pieces_.push_back(Piece::bytes(std::move(current_)));
    current_.clear();
    const auto* data = reinterpret_cast<const std::uint8_t*>(v->text.data());
    pieces_.push_back(Piece::shared(v, {data, v->text.size()}));
    body_ += v->text.size();
  }
  std::vector<Piece> finish() && {
    body_ += current_.size();
    if (!current_.empty()) pieces_.push_back(Piece::bytes(std::move(current_)));
    wire::put_u32(pieces_.front().owned.data(),
                  static_cast<std::uint32_t>(body_ - wire::kFrameHeaderBytes));
    return std::move(pieces_);
  }

 private:
  std::vector<std::uint8_t> current_;
  std::vector<Piece> pieces_;
  std::size_t body_ = 0;
};

}  // namespace

void ReplyTarget::deliver_pieces(std::vector<Piece> pieces) {
  std::vector<std::uint8_t> frame;
  for (const auto& piece : pieces) {
    const auto buffer = piece.buffer();
    const auto* p = static_cast<const std::uint8_t*>(buffer.data());
    frame.insert(frame.end(), p, p + buffer.size());
  }
  deliver(std::move(frame));
}

KeyValueState::~KeyValueState() {
  // Values may outlive the state in replies still queued; the budget they
  // point to is the server's, or this state's own (then nothing holds them).
  data_.clear();
}

std::size_t KeyValueState::parked_by(ReplyTarget& client) const {
  std::size_t n = 0;
  if (auto it = waits_by_client_.find(&client); it != waits_by_client_.end())
    n += it->second.size();
  if (auto it = arrivals_by_client_.find(&client); it != arrivals_by_client_.end()) {
    n += it->second.size();
  }
  return n;
}

void KeyValueState::reply_ok(ReplyTarget& client, std::uint32_t id) {
  client.deliver(std::move(wire::begin_reply(wire::ReplyStatus::Ok, id)).finish());
}

void KeyValueState::reply_error(ReplyTarget& client, std::uint32_t id, ErrorCode code,
                                std::string_view message) {
  client.deliver(wire::error_reply(id, code, message));
}

std::size_t KeyValueState::write_cost(std::string_view key, std::size_t size) const {
  const std::size_t value = size + sizeof(StoredValue) + 16;
  auto it = data_.find(key);
  if (it == data_.end()) return key.size() + kEntryOverhead + value;
  // An old value still referenced by a queued reply stays counted until sent.
  const std::size_t freed = it->second.use_count() == 1 ? it->second->counted : 0;
  return value > freed ? value - freed : 0;
}

bool KeyValueState::fits(ReplyTarget& client, std::uint32_t id, std::string_view what,
                         std::size_t need) {
  if (budget_->fits(need)) return true;
  reply_error(client, id, ErrorCode::StoreFull,
              fmt::format("{}: the store is full: it holds {} of its {} bytes of memory (stored "
                          "values, blocked requests and buffers), and this needs {} more; delete "
                          "keys, or give the server more (collie store serve --max-memory)",
                          what, budget_->used(), budget_->limit(), need));
  return false;
}

void KeyValueState::write(std::string_view key, std::string value) {
  if (auto it = data_.find(key); it != data_.end()) {
    it->second = std::make_shared<StoredValue>(std::move(value), *budget_);
  } else {
    budget_->take(key.size() + kEntryOverhead);
    data_.emplace(std::string(key), std::make_shared<StoredValue>(std::move(value), *budget_));
  }
}

void KeyValueState::erase(Data::iterator it) {
  budget_->give(it->first.size() + kEntryOverhead);
  data_.erase(it);
}

void KeyValueState::handle(ReplyTarget& client, const Request& req) {
  switch (req.op) {
    case Op::Set:
      if (!fits(client, req.id, describe_call("set", req.keys[0]),
                write_cost(req.keys[0], req.values[0].size()))) {
        return;
      }
      write(req.keys[0], std::string(req.values[0]));
      wake(std::string(req.keys[0]));
      reply_ok(client, req.id);
      return;
    case Op::Get:
    case Op::Wait:
    case Op::MultiGet: {
      const bool all_present = std::all_of(req.keys.begin(), req.keys.end(),
                                           [&](std::string_view k) { return data_.contains(k); });
      if (!all_present) {
        park(client, req);
        return;
      }
      answer(client, req.id, req.op, req.keys);
      return;
    }
    case Op::TryGet: {
      ReplyBuilder frame(wire::ReplyStatus::Ok, req.id);
      if (auto it = data_.find(req.keys[0]); it != data_.end()) {
        frame.writer().u8(1);
        frame.value(it->second);
      } else {
        frame.writer().u8(0);
      }
      client.deliver_pieces(std::move(frame).finish());
      return;
    }
    case Op::Add:
      add(client, req);
      return;
    case Op::CompareSet: {
      const auto key = req.keys[0];
      const auto expected = req.values[0];
      const auto desired = req.values[1];
      auto it = data_.find(key);
      const bool swap = it == data_.end() ? expected.empty() : it->second->text == expected;
      if (swap) {
        if (!fits(client, req.id, describe_call("compare_set", key),
                  write_cost(key, desired.size()))) {
          return;
        }
        write(key, std::string(desired));
        wake(std::string(key));
        it = data_.find(key);
      }
      ReplyBuilder frame(wire::ReplyStatus::Ok, req.id);
      frame.writer().u8(swap ? 1 : 0);
      frame.writer().u8(it != data_.end() ? 1 : 0);
      if (it != data_.end()) {
        frame.value(it->second);
      } else {
        frame.writer().bytes({});
      }
      client.deliver_pieces(std::move(frame).finish());
      return;
    }
    case Op::Check: {
      const bool all_present = std::all_of(req.keys.begin(), req.keys.end(),
                                           [&](std::string_view k) { return data_.contains(k); });
      auto frame = wire::begin_reply(wire::ReplyStatus::Ok, req.id);
      frame.body().u8(all_present ? 1 : 0);
      client.deliver(std::move(frame).finish());
      return;
    }
    case Op::Delete: {
      auto it = data_.find(req.keys[0]);
      const bool existed = it != data_.end();
      if (existed) erase(it);
      auto frame = wire::begin_reply(wire::ReplyStatus::Ok, req.id);
      frame.body().u8(existed ? 1 : 0);
      client.deliver(std::move(frame).finish());
      return;
    }
    case Op::CountKeys: {
      const auto prefix = req.keys[0];
      std::int64_t n = 0;
      if (prefix.empty()) {
        n = static_cast<std::int64_t>(data_.size());
      } else {
        for (auto it = data_.lower_bound(prefix);
             it != data_.end() && std::string_view(it->first).starts_with(prefix); ++it) {
          ++n;
        }
      }
      auto frame = wire::begin_reply(wire::ReplyStatus::Ok, req.id);
      frame.body().i64(n);
      client.deliver(std::move(frame).finish());
      return;
    }
    case Op::ListKeys: {
      const auto prefix = req.keys[0];
      std::vector<std::string_view> keys;
      std::size_t bytes = 64;
      bool truncated = false;
      for (auto it = data_.lower_bound(prefix);
           it != data_.end() && std::string_view(it->first).starts_with(prefix); ++it) {
        if (keys.size() == limits_.max_keys_per_request ||
            bytes + 4 + it->first.size() > limits_.max_message_bytes) {
          truncated = true;
          break;
        }
        bytes += 4 + it->first.size();
        keys.push_back(it->first);
      }
      if (!fits(client, req.id, describe_call("list_keys", prefix), bytes)) return;
      auto frame = wire::begin_reply(wire::ReplyStatus::Ok, req.id);
      frame.body().u8(truncated ? 1 : 0);
      frame.body().u32(static_cast<std::uint32_t>(keys.size()));
      for (auto key : keys)
        frame.body().bytes(key);
      client.deliver(std::move(frame).finish());
      return;
    }
    case Op::MultiSet: {
      std::size_t need = 0;
      for (std::size_t i = 0; i < req.keys.size(); ++i)
        need += write_cost(req.keys[i], req.values[i].size());
      if (!fits(client, req.id, fmt::format("multi_set of {} keys", req.keys.size()), need)) {
        return;
      }
      // Write everything first, then wake: a wait never sees half the set.
      for (std::size_t i = 0; i < req.keys.size(); ++i) {
        write(req.keys[i], std::string(req.values[i]));
      }
      for (auto key : req.keys)
        wake(std::string(key));
      reply_ok(client, req.id);
      return;
    }
    case Op::Append: {
      auto it = data_.find(req.keys[0]);
      const std::size_t old_size = it == data_.end() ? 0 : it->second->text.size();
      if (old_size + req.values[0].size() > limits_.max_value_bytes) {
        reply_error(client, req.id, ErrorCode::LimitExceeded,
                    fmt::format("append to {}: the value would grow to {} bytes, over the "
                                "store's limit of {} bytes",
                                quoted(req.keys[0]), old_size + req.values[0].size(),
                                limits_.max_value_bytes));
        return;
      }
      const std::size_t new_size = old_size + req.values[0].size();
      if (it == data_.end()) {
        if (!fits(client, req.id, describe_call("append", req.keys[0]),
                  write_cost(req.keys[0], new_size))) {
          return;
        }
        write(req.keys[0], std::string(req.values[0]));
      } else if (it->second.use_count() == 1) {
        // Grown in place, as std::string grows (to at least twice its capacity).
        const std::size_t capacity = it->second->text.capacity();
        const std::size_t need =
            new_size > capacity ? std::max(new_size, 2 * capacity) - capacity : 0;
        if (!fits(client, req.id, describe_call("append", req.keys[0]), need)) return;
        it->second->text.append(req.values[0]);
        it->second->recount();
      } else {
        // A queued reply still points at the old value: append to a copy.
        if (!fits(client, req.id, describe_call("append", req.keys[0]),
                  new_size + sizeof(StoredValue) + 16)) {
          return;
        }
        std::string text;
        text.reserve(new_size);
        text.append(it->second->text).append(req.values[0]);
        it->second = std::make_shared<StoredValue>(std::move(text), *budget_);
      }
      wake(std::string(req.keys[0]));
      reply_ok(client, req.id);
      return;
    }
    case Op::Barrier:
      enter_barrier(client, req);
      return;
    case Op::Cancel:
      cancel(client, req.number);
      return;
    case Op::Ping:
      reply_ok(client, req.id);
      return;
    case Op::Torch:  // a connection's own change (Session), never a request of the state
      reply_error(client, req.id, ErrorCode::Malformed, "torch: not a request of the store's state");
      return;
  }
}

void KeyValueState::add(ReplyTarget& client, const Request& req) {
  const auto key = req.keys[0];
  std::int64_t current = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& text = it->second->text;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
      reply_error(client, req.id, ErrorCode::NotAnInteger,
                  fmt::format("add to {}: the key holds {} bytes that are not a decimal int64",
                              quoted(key), text.size()));
      return;
    }
  }
  std::int64_t updated = 0;
  if (__builtin_add_overflow(current, req.delta, &updated)) {
    reply_error(client, req.id, ErrorCode::Overflow,
                fmt::format("add {} to {}: {} + {} overflows int64", req.delta, quoted(key),
                            current, req.delta));
    return;
  }
  std::string text = std::to_string(updated);
  if (!fits(client, req.id, describe_call("add", key), write_cost(key, text.size()))) return;
  write(key, std::move(text));
  wake(std::string(key));
  auto frame = wire::begin_reply(wire::ReplyStatus::Ok, req.id);
  frame.body().i64(updated);
  client.deliver(std::move(frame).finish());
}

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

template <class Keys>
void KeyValueState::answer(ReplyTarget& client, std::uint32_t id, Op op, const Keys& keys) {
  ReplyBuilder frame(wire::ReplyStatus::Ok, id);
  switch (op) {
    case Op::Get:
      frame.value(data_.find(keys[0])->second);
      break;
    case Op::MultiGet: {
      std::size_t bytes = 64;
      for (const auto& key : keys)
        bytes += 4 + data_.find(key)->second->text.size();
      if (bytes > limits_.max_message_bytes) {
        reply_error(client, id, ErrorCode::LimitExceeded,
                    fmt::format("multi_get of {} keys: the reply would be {} bytes, over the "
                                "store's limit of {} bytes per message",
                                keys.size(), bytes, limits_.max_message_bytes));
        return;
      }
      frame.writer().u32(static_cast<std::uint32_t>(keys.size()));
      for (const auto& key : keys)
        frame.value(data_.find(key)->second);
      break;
    }
    default:
      break;  // Wait: an empty OK
  }
  client.deliver_pieces(std::move(frame).finish());
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
