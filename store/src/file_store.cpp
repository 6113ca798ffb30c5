// The store in a file on a shared file system, under a file lock
// (file_store.hpp): each operation a step under the log's lock (file_log.hpp).
#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/store/file_store.hpp>

#include "counter.hpp"
#include "describe.hpp"
#include "file_log.hpp"
#include "protocol.hpp"

namespace collie::store {

using detail::Record;

class FileStore::Impl : public detail::FileLog {
 public:
  using FileLog::FileLog;
};

namespace {

void check_sizes(std::string_view what, std::string_view key, std::string_view value = {}) {
  const StoreLimits limits;
  if (key.size() > limits.max_key_bytes || value.size() > limits.max_value_bytes) {
    throw RequestError(
        fmt::format("file store: {}: key of {} bytes or value of {} bytes exceeds "
                    "the limits ({} and {} bytes)",
                    what, key.size(), value.size(), limits.max_key_bytes, limits.max_value_bytes));
  }
}

}  // namespace

FileStore::FileStore(std::string path, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(std::move(path), timeout)) {}
FileStore::~FileStore() = default;

const std::string& FileStore::path() const {
  return impl_->path();
}
std::chrono::milliseconds FileStore::timeout() const {
  return impl_->timeout();
}

void FileStore::set(std::string_view key, std::string_view value, Timeout timeout) {
  check_sizes("set", key, value);
  impl_->locked(timeout, [&] {
    impl_->append_record(Record::Set, key, value);
    impl_->flush();
  });
}

std::string FileStore::get(std::string_view key, Timeout timeout) {
  std::string value;
  impl_->poll_until(
      impl_->limit(timeout),
      [&] {
        auto it = impl_->data.find(key);
        if (it == impl_->data.end()) return false;
        value = it->second;
        return true;
      },
      describe_call("get", key) + " (the key was not set in time)");
  return value;
}

std::optional<std::string> FileStore::try_get(std::string_view key, Timeout timeout) {
  return impl_->locked(timeout, [&]() -> std::optional<std::string> {
    auto it = impl_->data.find(key);
    if (it == impl_->data.end()) return std::nullopt;
    return it->second;
  });
}

std::int64_t FileStore::add(std::string_view key, std::int64_t delta, Timeout timeout) {
  check_sizes("add", key);
  return impl_->locked(timeout, [&] {
    std::int64_t current = 0;
    if (auto it = impl_->data.find(key); it != impl_->data.end()) {
      const auto parsed = parse_counter(it->second);
      if (!parsed) {
        throw RequestError(
            fmt::format("file store: add to '{}': the key holds {} bytes that are "
                        "not a decimal int64",
                        printable_key(key), it->second.size()));
      }
      current = *parsed;
    }
    std::int64_t updated = 0;
    if (__builtin_add_overflow(current, delta, &updated)) {
      throw RequestError(fmt::format("file store: add {} to '{}': {} + {} overflows int64", delta,
                                     printable_key(key), current, delta));
    }
    impl_->append_record(Record::Set, key, std::to_string(updated));
    impl_->flush();
    return updated;
  });
}

CompareSetResult FileStore::compare_set(std::string_view key, std::string_view expected,
                                        std::string_view desired, Timeout timeout) {
  check_sizes("compare_set", key, desired);
  return impl_->locked(timeout, [&] {
    auto it = impl_->data.find(key);
    const bool swap = it == impl_->data.end() ? expected.empty() : it->second == expected;
    if (swap) {
      impl_->append_record(Record::Set, key, desired);
      impl_->flush();
    }
    CompareSetResult result;
    result.swapped = swap;
    if (auto now = impl_->data.find(key); now != impl_->data.end()) result.current = now->second;
    return result;
  });
}

void FileStore::wait(std::span<const std::string> keys, Timeout timeout) {
  if (keys.empty()) return;
  impl_->poll_until(
      impl_->limit(timeout),
      [&] {
        return std::all_of(keys.begin(), keys.end(),
                           [&](const std::string& k) { return impl_->data.contains(k); });
      },
      describe_call("wait", keys) + " (not every key was set in time)");
}

bool FileStore::check(std::span<const std::string> keys, Timeout timeout) {
  return impl_->locked(timeout, [&] {
    return std::all_of(keys.begin(), keys.end(),
                       [&](const std::string& k) { return impl_->data.contains(k); });
  });
}

bool FileStore::delete_key(std::string_view key, Timeout timeout) {
  return impl_->locked(timeout, [&] {
    if (!impl_->data.contains(key)) return false;
    impl_->append_record(Record::Delete, key, {});
    impl_->flush();
    return true;
  });
}

std::int64_t FileStore::count_keys(std::string_view prefix, Timeout timeout) {
  return impl_->locked(timeout, [&] {
    std::int64_t n = 0;
    for (auto it = impl_->data.lower_bound(prefix);
         it != impl_->data.end() && std::string_view(it->first).starts_with(prefix); ++it) {
      ++n;
    }
    return n;
  });
}

std::vector<std::string> FileStore::list_keys(std::string_view prefix, Timeout timeout) {
  return impl_->locked(timeout, [&] {
    std::vector<std::string> keys;
    for (auto it = impl_->data.lower_bound(prefix);
         it != impl_->data.end() && std::string_view(it->first).starts_with(prefix); ++it) {
      keys.push_back(it->first);
    }
    return keys;
  });
}

std::vector<std::string> FileStore::multi_get(std::span<const std::string> keys, Timeout timeout) {
  std::vector<std::string> values;
  if (keys.empty()) return values;
  impl_->poll_until(
      impl_->limit(timeout),
      [&] {
        if (!std::all_of(keys.begin(), keys.end(),
                         [&](const std::string& k) { return impl_->data.contains(k); })) {
          return false;
        }
        values.clear();
        for (const auto& k : keys)
          values.push_back(impl_->data.find(k)->second);
        return true;
      },
      describe_call("multi_get", keys) + " (not every key was set in time)");
  return values;
}

void FileStore::multi_set(std::span<const std::string> keys, std::span<const std::string> values,
                          Timeout timeout) {
  if (keys.size() != values.size()) {
    throw ArgumentError(
        fmt::format("file store multi_set: {} keys but {} values", keys.size(), values.size()));
  }
  for (std::size_t i = 0; i < keys.size(); ++i)
    check_sizes("multi_set", keys[i], values[i]);
  impl_->locked(timeout, [&] {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      impl_->append_record(Record::Set, keys[i], values[i]);
    }
    impl_->flush();  // one write: readers see all of it or none
  });
}

void FileStore::append(std::string_view key, std::string_view value, Timeout timeout) {
  impl_->locked(timeout, [&] {
    auto it = impl_->data.find(key);
    std::string joined = it == impl_->data.end() ? std::string() : it->second;
    joined.append(value);
    check_sizes("append", key, joined);
    impl_->append_record(Record::Set, key, joined);
    impl_->flush();
  });
}

void FileStore::barrier(std::string_view name, std::uint32_t n, Timeout timeout) {
  if (n == 0) {
    throw RequestError(
        fmt::format("file store: barrier '{}': n must be at least 1", printable_key(name)));
  }
  check_sizes("barrier", name);
  // Arrivals count up across generations; this caller's generation ends
  // when the count reaches the next multiple of n.
  const std::int64_t target = impl_->locked(timeout, [&] {
    auto& b = impl_->barriers[std::string(name)];
    if (b.n != 0 && b.n != n && b.arrivals % b.n != 0) {
      throw RequestError(
          fmt::format("file store: barrier '{}': this caller says n={}, but the "
                      "{} caller(s) waiting in it said n={}",
                      printable_key(name), n, b.arrivals % b.n, b.n));
    }
    // Reused with another n after its last generation completed: count anew.
    const std::int64_t arrival = (b.n == n ? b.arrivals : 0) + 1;
    impl_->append_record(Record::Barrier, name, fmt::format("{} {}", arrival, n));
    impl_->flush();
    return ((arrival - 1) / n + 1) * static_cast<std::int64_t>(n);
  });
  impl_->poll_until(
      impl_->limit(timeout), [&] { return impl_->barriers[std::string(name)].arrivals >= target; },
      fmt::format("barrier('{}', n={}) (not every caller arrived in time)", printable_key(name), n),
      [&] {
        // Take this caller back out, unless the barrier completed meanwhile.
        auto& b = impl_->barriers[std::string(name)];
        if (b.arrivals < target) {
          impl_->append_record(Record::Barrier, name, fmt::format("{} {}", b.arrivals - 1, n));
          impl_->flush();
        }
      });
}

}  // namespace collie::store
