// The file store's log (file_log.cpp): records appended to one file under
// its lock, and the keys and barriers they add up to. FileStore
// (file_store.cpp) runs each Store operation as a step under this lock.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/store/store.hpp>

namespace collie::store::detail {

enum class Record : std::uint8_t { Set = 1, Delete = 2, Barrier = 3 };

// What a barrier's records say: arrivals so far (all generations) and n.
struct BarrierState {
  std::int64_t arrivals = 0;
  std::uint32_t n = 0;
};

class FileLog {
 public:
  using Clock = std::chrono::steady_clock;

  // How long a timed-out barrier may wait for the lock to take itself back out.
  static constexpr auto kUndoTime = std::chrono::seconds(5);

  FileLog(std::string path, std::chrono::milliseconds timeout);
  ~FileLog();
  FileLog(const FileLog&) = delete;
  FileLog& operator=(const FileLog&) = delete;

  const std::string& path() const { return path_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  std::chrono::milliseconds limit(Timeout t) const;

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
      FileLog* self;
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

  // Adds a record to this lock's pending write and to the maps.
  void append_record(Record type, std::string_view key, std::string_view value);

  // Writes the records appended under this lock in one write.
  void flush();

  std::map<std::string, std::string, std::less<>> data;
  std::map<std::string, BarrierState, std::less<>> barriers;

 private:
  // Takes the file's exclusive lock, retrying with backoff until `deadline`:
  // a process stopped while holding it must not hang this one.
  void lock_file(Clock::time_point deadline);
  void unlock_file();
  void apply(Record type, std::string_view key, std::string_view value);
  // Applies the records other writers appended since the last look.
  void catch_up();

  std::string path_;
  std::chrono::milliseconds timeout_;
  int fd_ = -1;
  off_t offset_ = 0;
  std::vector<std::uint8_t> pending_;
  std::mutex mutex_;
};

}  // namespace collie::store::detail
