// The store's data and its blocked requests, without any I/O.
//
// The server hands every parsed request to handle(); the state answers at
// once through the client's ReplyTarget, or parks the request (get, wait,
// multi_get on missing keys; barrier before n callers) and answers when a
// later write or arrival completes it. Waits are pushed, never polled.
//
// A parked wait is registered on exactly one of its missing keys at a time:
// when that key is written the wait re-checks its keys from there on, and
// either completes or moves to the next missing key. So a write costs time
// proportional to the waits on that key only.
//
// Memory: every stored key and value and every parked request is counted in
// a MemoryBudget that the server shares with its connections' buffers. A
// request that would take the budget past its limit is refused (StoreFull)
// and changes nothing. A value is counted until its last reference goes:
// replies point into stored values instead of copying them, so a reply
// waiting for a slow reader keeps an overwritten value counted.
//
// Not thread-safe: the server calls it from its one I/O thread.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <collie/store/store.hpp>

#include "frame_queue.hpp"
#include "protocol.hpp"

namespace collie::store {

// Bytes the server holds for its clients, against one limit.
class MemoryBudget {
 public:
  explicit MemoryBudget(std::size_t limit = std::numeric_limits<std::size_t>::max())
      : limit_(limit) {}
  bool fits(std::size_t n) const { return n <= limit_ && used_ <= limit_ - n; }
  bool over() const { return used_ > limit_; }
  void take(std::size_t n) { used_ += n; }
  void give(std::size_t n) { used_ -= n; }
  std::size_t used() const { return used_; }
  std::size_t limit() const { return limit_; }

 private:
  std::size_t limit_;
  std::size_t used_ = 0;
};

// A stored value; counted in its budget for as long as it lives.
struct StoredValue {
  StoredValue(std::string t, MemoryBudget& b) : text(std::move(t)), budget(&b) { recount(); }
  ~StoredValue() { budget->give(counted); }
  StoredValue(const StoredValue&) = delete;
  StoredValue& operator=(const StoredValue&) = delete;
  void recount() {
    budget->give(counted);
    counted = text.capacity() + sizeof(StoredValue) + 16;
    budget->take(counted);
  }
  std::string text;
  MemoryBudget* budget;
  std::size_t counted = 0;
};

// Where replies for one client go (the server's connection object).
class ReplyTarget {
 public:
  virtual void deliver(std::vector<std::uint8_t> frame) = 0;
  // A reply in pieces (some point into stored values). By default it is
  // copied into one frame.
  virtual void deliver_pieces(std::vector<Piece> pieces);

 protected:
  ~ReplyTarget() = default;
};

class KeyValueState {
 public:
  // `budget` counts what the state holds; null: an unlimited budget of its own.
  // `max_waits` caps the blocked requests of all clients together.
  KeyValueState(StoreLimits limits, std::size_t max_waits_per_client,
                MemoryBudget* budget = nullptr,
                std::size_t max_waits = std::numeric_limits<std::size_t>::max())
      : limits_(limits),
        max_waits_per_client_(max_waits_per_client),
        max_waits_(max_waits),
        budget_(budget != nullptr ? budget : &own_budget_) {}
  ~KeyValueState();
  KeyValueState(const KeyValueState&) = delete;
  KeyValueState& operator=(const KeyValueState&) = delete;

  // Executes a valid request for `client`. The reply may come later.
  void handle(ReplyTarget& client, const wire::Request& request);

  // The client is gone: drop its parked waits and barrier arrivals.
  void forget(ReplyTarget& client);

  // Number of requests parked right now (for tests and the server's logs).
  std::size_t parked() const { return parked_count_; }
  // True if `client` has a request parked.
  bool has_parked(ReplyTarget& client) const { return parked_by(client) > 0; }
  // Keys stored, and the bytes the state holds in its budget.
  std::size_t keys() const { return data_.size(); }

 private:
  struct Wait {
    ReplyTarget* client;
    std::uint32_t id;
    wire::Op op;  // Get, MultiGet or Wait
    std::vector<std::string> keys;
    std::size_t next_missing = 0;  // index of the key it is registered on
    std::size_t counted = 0;       // bytes in the budget
  };
  struct Barrier {
    std::uint32_t n = 0;
    std::vector<std::pair<ReplyTarget*, std::uint32_t>> arrived;
  };
  using Key = std::string;
  using Value = std::shared_ptr<StoredValue>;
  using Data = std::map<Key, Value, std::less<>>;

  void reply_ok(ReplyTarget& client, std::uint32_t id);
  void reply_error(ReplyTarget& client, std::uint32_t id, wire::ErrorCode code,
                   std::string_view message);
  // Bytes the budget needs to write a value of `size` under `key`.
  std::size_t write_cost(std::string_view key, std::size_t size) const;
  // Refuses with StoreFull (and returns false) when `need` bytes do not fit.
  bool fits(ReplyTarget& client, std::uint32_t id, std::string_view what, std::size_t need);
  void write(std::string_view key, std::string value);  // does not wake: call wake() after
  void erase(Data::iterator it);
  void release(Wait& wait);
  std::size_t parked_by(ReplyTarget& client) const;
  void wake(const Key& key);
  // Advances `wait` past keys that exist; true if none is missing any more.
  bool advance(Wait& wait) const;
  // Answers a get, wait or multi_get whose keys all exist.
  template <class Keys>
  void answer(ReplyTarget& client, std::uint32_t id, wire::Op op, const Keys& keys);
  void park(ReplyTarget& client, const wire::Request& request);
  void enter_barrier(ReplyTarget& client, const wire::Request& request);
  void cancel(ReplyTarget& client, std::uint32_t id);
  void unregister(const std::shared_ptr<Wait>& wait);
  void leave_barrier(std::string_view name);
  void add(ReplyTarget& client, const wire::Request& request);

  StoreLimits limits_;
  std::size_t max_waits_per_client_;
  std::size_t max_waits_;
  MemoryBudget own_budget_;
  MemoryBudget* budget_;
  std::size_t parked_count_ = 0;
  Data data_;
  std::map<Key, std::vector<std::shared_ptr<Wait>>, std::less<>> waits_by_key_;
  std::unordered_map<ReplyTarget*, std::unordered_map<std::uint32_t, std::shared_ptr<Wait>>>
      waits_by_client_;
  std::map<Key, Barrier, std::less<>> barriers_;
  // client -> (request id -> barrier name), to cancel and count its arrivals.
  std::unordered_map<ReplyTarget*, std::unordered_map<std::uint32_t, Key>> arrivals_by_client_;
};

}  // namespace collie::store
