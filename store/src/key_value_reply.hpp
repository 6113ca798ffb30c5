// What the key-value state's two halves share (key_value_state.hpp): the
// budget's costs beyond the bytes themselves, and a reply whose large
// values point into the stored ones instead of copying them. Private to
// key_value_state.cpp and key_value_waits.cpp.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "describe.hpp"
#include "key_value_state.hpp"

namespace collie::store::kv {

inline std::string quoted(std::string_view key) {
  return fmt::format("'{}'", printable_key(key));
}

// What the budget counts beyond the bytes themselves: a map node with its
// key's string, a parked wait's bookkeeping, a barrier arrival.
inline constexpr std::size_t kEntryOverhead = 96;
inline constexpr std::size_t kWaitOverhead = 192;
inline constexpr std::size_t kWaitKeyOverhead = 96;
inline constexpr std::size_t kArrivalOverhead = 128;
// Values at least this large go out by reference, not copied into the reply.
inline constexpr std::size_t kShareValuesFrom = 4096;

inline std::size_t wait_cost(std::span<const std::string_view> keys) {
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

}  // namespace collie::store::kv

namespace collie::store {

// The reply to a get, wait, check or multi_get whose keys are all there
// (both halves answer: at once, or when a parked one completes).
template <class Keys>
void KeyValueState::answer(ReplyTarget& client, std::uint32_t id, wire::Op op, const Keys& keys) {
  kv::ReplyBuilder frame(wire::ReplyStatus::Ok, id);
  switch (op) {
    case wire::Op::Get:
      frame.value(data_.find(keys[0])->second);
      break;
    case wire::Op::MultiGet: {
      std::size_t bytes = 64;
      for (const auto& key : keys)
        bytes += 4 + data_.find(key)->second->text.size();
      if (bytes > limits_.max_message_bytes) {
        reply_error(client, id, wire::ErrorCode::LimitExceeded,
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

}  // namespace collie::store
