// The rendezvous store interface: a small key-value store that the processes
// of a job use to find each other and to agree on small facts.
//
// Keys and values are arbitrary bytes (std::string is used as a byte
// container; embedded NULs are fine). Every call that can block has a
// timeout: pass one per call, or leave it out to use the store's default
// (StoreClient: 300 s unless its options say otherwise). A call that times out
// throws collie::TimeoutError and leaves the store object usable.
//
// Implementations: StoreClient (TCP client of a StoreServer) and PrefixStore
// (a namespaced view of another Store).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace collie::store {

// Per-call timeout; nullopt means "the store's default timeout".
using Timeout = std::optional<std::chrono::milliseconds>;

// Result of compare_set().
struct CompareSetResult {
  bool swapped = false;                // the desired value was written
  std::optional<std::string> current;  // the key's value after the call; nullopt if it is missing
};

// Sizes a store server accepts. The server announces its limits in the
// handshake and clients check requests against them before sending, so an
// oversized request fails at once with a RequestError naming the limit.
struct StoreLimits {
  std::uint32_t max_key_bytes = 4096;
  std::uint32_t max_value_bytes = 32u << 20;                   // 32 MiB
  std::uint32_t max_keys_per_request = 65536;                  // wait, check, multi_get, multi_set
  std::uint32_t max_message_bytes = (32u << 20) + (1u << 20);  // any one request or reply
};

class Store {
 public:
  virtual ~Store() = default;

  // Writes `value` under `key`, replacing any previous value, and wakes
  // every get/wait/multi_get blocked on it.
  virtual void set(std::string_view key, std::string_view value, Timeout timeout = {}) = 0;

  // Returns the value of `key`, waiting until some client sets it.
  // Throws TimeoutError if it is not set within the timeout.
  virtual std::string get(std::string_view key, Timeout timeout = {}) = 0;

  // Returns the value of `key`, or nullopt at once if it is missing.
  virtual std::optional<std::string> try_get(std::string_view key, Timeout timeout = {}) = 0;

  // Adds `delta` to the integer counter under `key` (a missing key counts as
  // 0) and returns the new value. Atomic across clients. The value is stored
  // as decimal text, so get() reads it as e.g. "42". Throws RequestError if
  // the key holds something that is not an integer, or on int64 overflow.
  virtual std::int64_t add(std::string_view key, std::int64_t delta, Timeout timeout = {}) = 0;

  // Atomically: if the key's value equals `expected`, writes `desired`. A
  // missing key matches an empty `expected` (so compare_set(k, "", v) creates
  // k only if it does not exist yet).
  virtual CompareSetResult compare_set(std::string_view key, std::string_view expected,
                                       std::string_view desired, Timeout timeout = {}) = 0;

  // Blocks until every key in `keys` exists. The server pushes the answer;
  // nobody polls. Throws TimeoutError naming the keys still missing.
  virtual void wait(std::span<const std::string> keys, Timeout timeout = {}) = 0;

  // True if every key in `keys` exists right now.
  virtual bool check(std::span<const std::string> keys, Timeout timeout = {}) = 0;

  // Removes `key`. Returns whether it existed.
  virtual bool delete_key(std::string_view key, Timeout timeout = {}) = 0;

  // Number of keys, in this view, whose name starts with `prefix`.
  virtual std::int64_t count_keys(std::string_view prefix, Timeout timeout = {}) = 0;

  // Names of the keys, in this view, that start with `prefix`, in byte order.
  virtual std::vector<std::string> list_keys(std::string_view prefix, Timeout timeout = {}) = 0;

  // Values of several keys, in order, waiting until all of them exist.
  virtual std::vector<std::string> multi_get(std::span<const std::string> keys,
                                             Timeout timeout = {}) = 0;

  // Sets several keys at once (atomically: no client sees half of them).
  // `keys` and `values` must have the same length.
  virtual void multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                         Timeout timeout = {}) = 0;

  // Appends `value` to the key's value, creating the key if it is missing.
  virtual void append(std::string_view key, std::string_view value, Timeout timeout = {}) = 0;

  // Blocks until `n` callers (n >= 1) have entered the barrier called `name`;
  // the server releases them all at once, and the name can then be used
  // again. Every caller must pass the same n (RequestError otherwise). A
  // caller that times out or disconnects is taken back out of the count.
  // Barrier names are a namespace of their own: they are not keys.
  virtual void barrier(std::string_view name, std::uint32_t n, Timeout timeout = {}) = 0;

  // The default timeout of this store's calls.
  virtual std::chrono::milliseconds timeout() const = 0;

  // Number of keys in this view.
  std::int64_t num_keys(Timeout timeout = {}) { return count_keys("", timeout); }

  // Convenience overloads for a single key and for brace lists.
  void wait(const std::vector<std::string>& keys, Timeout timeout = {}) {
    wait(std::span<const std::string>(keys), timeout);
  }
  bool check(const std::vector<std::string>& keys, Timeout timeout = {}) {
    return check(std::span<const std::string>(keys), timeout);
  }
  std::vector<std::string> multi_get(const std::vector<std::string>& keys, Timeout timeout = {}) {
    return multi_get(std::span<const std::string>(keys), timeout);
  }
  void multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values,
                 Timeout timeout = {}) {
    multi_set(std::span<const std::string>(keys), std::span<const std::string>(values), timeout);
  }
};

}  // namespace collie::store

// The declarations of every call of Store, for the class body of a store
// that implements them all as Store documents them (StoreClient,
// FileStore, PrefixStore): one list, so that a call added to the interface
// is declared once. The overloads for vectors stay visible.
#define COLLIE_STORE_OVERRIDES                                                                  \
  using Store::check;                                                                           \
  using Store::multi_get;                                                                       \
  using Store::multi_set;                                                                       \
  using Store::wait;                                                                            \
  void set(std::string_view key, std::string_view value, Timeout timeout = {}) override;        \
  std::string get(std::string_view key, Timeout timeout = {}) override;                         \
  std::optional<std::string> try_get(std::string_view key, Timeout timeout = {}) override;      \
  std::int64_t add(std::string_view key, std::int64_t delta, Timeout timeout = {}) override;    \
  CompareSetResult compare_set(std::string_view key, std::string_view expected,                 \
                               std::string_view desired, Timeout timeout = {}) override;        \
  void wait(std::span<const std::string> keys, Timeout timeout = {}) override;                  \
  bool check(std::span<const std::string> keys, Timeout timeout = {}) override;                 \
  bool delete_key(std::string_view key, Timeout timeout = {}) override;                         \
  std::int64_t count_keys(std::string_view prefix, Timeout timeout = {}) override;              \
  std::vector<std::string> list_keys(std::string_view prefix, Timeout timeout = {}) override;   \
  std::vector<std::string> multi_get(std::span<const std::string> keys,                         \
                                     Timeout timeout = {}) override;                            \
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values,        \
                 Timeout timeout = {}) override;                                                \
  void append(std::string_view key, std::string_view value, Timeout timeout = {}) override;     \
  void barrier(std::string_view name, std::uint32_t n, Timeout timeout = {}) override;          \
  std::chrono::milliseconds timeout() const override;
