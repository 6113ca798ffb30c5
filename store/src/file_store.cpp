// The store in a file on a shared file system, under a file lock
// (file_store.hpp).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <sys/file.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/store/file_store.hpp>

#include "describe.hpp"
#include "protocol.hpp"

namespace collie::store {

namespace {

using Clock = std::chrono::steady_clock;

// How long a timed-out barrier may wait for the lock to take itself back out.
constexpr auto kUndoTime = std::chrono::seconds(5);

enum class Record : std::uint8_t { Set = 1, Delete = 2, Barrier = 3 };

// What a barrier's records say: arrivals so far (all generations) and n.
struct BarrierState {
  std::int64_t arrivals = 0;
  std::uint32_t n = 0;
};

std::optional<std::int64_t> parse_int64(const std::string& text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

class FileStore::Impl {
 public:
  Impl(std::string path, std::chrono::milliseconds timeout)
      : path_(std::move(path)), timeout_(timeout) {
    if (timeout_ <= std::chrono::milliseconds::zero()) {
      throw ArgumentError("FileStore: the timeout must be positive");
    }
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      throw Error(fmt::format("file store: cannot open '{}': {}", path_, std::strerror(errno)));
    }
  }
  ~Impl() { close(fd_); }

  const std::string& path() const { return path_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::chrono::milliseconds limit(Timeout t) const {
    const auto value = t.value_or(timeout_);
    if (value <= std::chrono::milliseconds::zero()) {
      throw ArgumentError("file store: the timeout must be positive");
    }
    return value;
  }

  // Runs `f` with the file locked and this object caught up with it. Waits
  // for the lock at most until the call's timeout.
  template <class F>
  auto locked(Timeout timeout, F f) {
    return locked_until(Clock::now() + limit(timeout), f);
  }

  template <class F>
  auto locked_until(Clock::time_point deadline, F f) {
    std::lock_guard guard(mutex_);
    lock_file(deadline);
    struct Unlock {
      Impl* self;
      ~Unlock() { self->unlock_file(); }
    } unlock{this};
    catch_up();
    return f();
  }

  // Polls `ready` (run under the lock) until it returns true or the timeout
  // runs out; then `on_timeout` runs under the lock and a TimeoutError says `what`.
  template <class Ready>
  void poll_until(std::chrono::milliseconds timeout, Ready ready, const std::string& what,
                  const std::function<void()>& on_timeout = {}) {
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    while (!locked_until(deadline, ready)) {
      if (Clock::now() >= deadline) {
        // Undoing takes the lock once more, briefly.
        if (on_timeout) locked_until(Clock::now() + kUndoTime, [&] { on_timeout(); });
        throw TimeoutError(fmt::format("file store '{}': {} timed out after {}", path_, what,
                                       describe_duration(timeout)));
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }

  void append_record(Record type, std::string_view key, std::string_view value) {
    std::vector<std::uint8_t> bytes;
    wire::Writer w(bytes);
    w.u8(static_cast<std::uint8_t>(type));
    w.bytes(key);
    w.bytes(value);
    pending_.insert(pending_.end(), bytes.begin(), bytes.end());
    apply(type, key, value);
  }

  // Writes the records appended under this lock in one write.
  void flush() {
    std::size_t done = 0;
    while (done < pending_.size()) {
      const ssize_t n = write(fd_, pending_.data() + done, pending_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        pending_.clear();
        throw Error(fmt::format("file store: cannot write '{}': {}", path_, std::strerror(errno)));
      }
      done += static_cast<std::size_t>(n);
    }
    offset_ += static_cast<off_t>(pending_.size());
    pending_.clear();
  }

  std::map<std::string, std::string, std::less<>> data;
  std::map<std::string, BarrierState, std::less<>> barriers;

 private:
  // Takes the file's exclusive lock, retrying with backoff until `deadline`:
  // a process stopped while holding it must not hang this one.
  void lock_file(Clock::time_point deadline) {
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    auto pause = std::chrono::microseconds(100);
    while (fcntl(fd_, F_OFD_SETLK, &lock) != 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EACCES) {
        throw Error(fmt::format("file store: cannot lock '{}': {}", path_, std::strerror(errno)));
      }
      if (Clock::now() >= deadline) {
        throw TimeoutError(
            fmt::format("file store '{}': another process held the file's lock "
                        "until the timeout ran out",
                        path_));
      }
      std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - Clock::now()));
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(50));
    }
  }

  void unlock_file() {
    struct flock lock {};
    lock.l_type = F_UNLCK;
    lock.l_whence = SEEK_SET;
    fcntl(fd_, F_OFD_SETLK, &lock);  // cannot fail for a lock we hold
  }

  void apply(Record type, std::string_view key, std::string_view value) {
    switch (type) {
      case Record::Set:
        data.insert_or_assign(std::string(key), std::string(value));
        break;
      case Record::Delete:
        data.erase(std::string(key));
        break;
      case Record::Barrier: {
        // value: "<arrivals> <n>"
        const auto space = value.find(' ');
        auto& b = barriers[std::string(key)];
        b.arrivals = parse_int64(std::string(value.substr(0, space))).value_or(0);
        b.n = static_cast<std::uint32_t>(
            parse_int64(std::string(value.substr(space + 1))).value_or(0));
        break;
      }
    }
  }

  // Applies the records other writers appended since the last look.
  void catch_up() {
    struct stat info {};
    if (fstat(fd_, &info) != 0) {
      throw Error(fmt::format("file store: cannot stat '{}': {}", path_, std::strerror(errno)));
    }
    if (info.st_size < offset_) {
      throw Error(
          fmt::format("file store: '{}' shrank from {} to {} bytes; was it replaced or "
                      "truncated while in use?",
                      path_, offset_, info.st_size));
    }
    if (info.st_size == offset_) return;
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(info.st_size - offset_));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n =
          pread(fd_, bytes.data() + got, bytes.size() - got, offset_ + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error(fmt::format("file store: cannot read '{}': {}", path_, std::strerror(errno)));
      }
      got += static_cast<std::size_t>(n);
    }
    wire::Reader r(bytes);
    while (r.remaining() > 0) {
      const auto type = r.u8();
      const auto key = r.bytes();
      const auto value = r.bytes();
      if (!r.ok() || type < 1 || type > 3) {
        throw Error(
            fmt::format("file store: '{}' is corrupt after byte {} (not a collie store "
                        "file, or a writer died mid-record)",
                        path_, offset_));
      }
      apply(static_cast<Record>(type), key, value);
    }
    offset_ = info.st_size;
  }

  std::string path_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  off_t offset_ = 0;
  std::vector<std::uint8_t> pending_;
  std::mutex mutex_;
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
      const auto parsed = parse_int64(it->second);
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
