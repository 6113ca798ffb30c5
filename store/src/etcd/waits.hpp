// The etcd store's blocking calls: reading keys as of one revision, waiting
// for keys by watching from that revision on (etcd pushes every change, so
// nothing is missed between the read and the watch), and the barrier.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "session.hpp"

namespace collie::store::etcd {

// The values of `keys` (nullopt where missing), all as of one revision
// (per 128 keys: etcd's limit of operations in one transaction).
struct Read {
  std::vector<std::optional<std::string>> values;
  std::int64_t revision = 0;
};
Read read_keys(Session& s, std::span<const std::string> keys, Clock::time_point deadline,
               std::string_view what, Timeout timeout);

// Waits until every key exists and returns their values. TimeoutError at the
// deadline names the keys still missing.
std::vector<std::string> wait_for_keys(Session& s, std::span<const std::string> keys,
                                       std::string_view what, Timeout timeout);

// Store::barrier on etcd: each caller enters with a key of its own (on the
// lease: a caller that dies leaves), the one whose entry makes n releases
// everyone by moving the barrier's generation on, and the others watch
// the generation.
void enter_barrier(Session& s, std::string_view name, std::uint32_t n, Timeout timeout);

}  // namespace collie::store::etcd
