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
// Not thread-safe: the server calls it from its one I/O thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <collie/store/store.hpp>

#include "protocol.hpp"

namespace collie::store {

// Where replies for one client go (the server's connection object).
class ReplyTarget {
 public:
  virtual void deliver(std::vector<std::uint8_t> frame) = 0;

 protected:
  ~ReplyTarget() = default;
};

class KeyValueState {
 public:
  KeyValueState(StoreLimits limits, std::size_t max_waits_per_client)
      : limits_(limits), max_waits_per_client_(max_waits_per_client) {}

  // Executes a valid request for `client`. The reply may come later.
  void handle(ReplyTarget& client, const wire::Request& request);

  // The client is gone: drop its parked waits and barrier arrivals.
  void forget(ReplyTarget& client);

  // Number of requests parked right now (for tests and the server's logs).
  std::size_t parked() const;

 private:
  struct Wait {
    ReplyTarget* client;
    std::uint32_t id;
    wire::Op op;  // Get, MultiGet or Wait
    std::vector<std::string> keys;
    std::size_t next_missing = 0;  // index of the key it is registered on
  };
  struct Barrier {
    std::uint32_t n = 0;
    std::vector<std::pair<ReplyTarget*, std::uint32_t>> arrived;
  };
  using Key = std::string;

  void reply_ok(ReplyTarget& client, std::uint32_t id);
  void reply_error(ReplyTarget& client, std::uint32_t id, wire::ErrorCode code,
                   std::string_view message);
  void write(std::string_view key, std::string value);  // does not wake: call wake() after
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
  void add(ReplyTarget& client, const wire::Request& request);

  StoreLimits limits_;
  std::size_t max_waits_per_client_;
  std::map<Key, std::string, std::less<>> data_;
  std::map<Key, std::vector<std::shared_ptr<Wait>>, std::less<>> waits_by_key_;
  std::unordered_map<ReplyTarget*, std::unordered_map<std::uint32_t, std::shared_ptr<Wait>>>
      waits_by_client_;
  std::map<Key, Barrier, std::less<>> barriers_;
  // client -> (request id -> barrier name), to cancel and count its arrivals.
  std::unordered_map<ReplyTarget*, std::unordered_map<std::uint32_t, Key>> arrivals_by_client_;
};

}  // namespace collie::store
