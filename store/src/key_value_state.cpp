// The store's data: the requests answered at once, and the writes that
// wake parked ones (key_value_state.hpp; the parked ones and the barriers
// are key_value_waits.cpp's).
#include "key_value_state.hpp"

#include <algorithm>

#include <fmt/format.h>

#include <collie/log.hpp>

#include "counter.hpp"
#include "describe.hpp"
#include "key_value_reply.hpp"

namespace collie::store {

using wire::ErrorCode;
using wire::Op;
using wire::Request;
using namespace kv;

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
    const auto parsed = parse_counter(text);
    if (!parsed) {
      reply_error(client, req.id, ErrorCode::NotAnInteger,
                  fmt::format("add to {}: the key holds {} bytes that are not a decimal int64",
                              quoted(key), text.size()));
      return;
    }
    current = *parsed;
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

}  // namespace collie::store
