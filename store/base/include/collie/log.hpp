// collie's logger.
//
// Every layer logs through one spdlog logger named "collie", written to
// stderr. Its level comes from COLLIE_LOG_LEVEL (off, error, warn, info,
// debug, trace; default warn) the first time log() is called, and can be
// changed later with set_log_level(). It lives in the base layer, so that
// every layer above can use it. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include <spdlog/spdlog.h>

namespace collie {

// The shared logger. Created on first use.
spdlog::logger& log();

// Parses a level name as COLLIE_LOG_LEVEL accepts it (case-insensitive).
// Returns nullopt for anything else.
std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name);

// Sets the level of the shared logger.
void set_log_level(spdlog::level::level_enum level);

// Lines about one source (a peer's address) through the shared logger, at
// most one per interval: a flood of refused strangers cannot flood the log.
// The lines left out are counted; flush() logs the count (with the last of
// them) once their interval has ended. While `max_sources` sources are in
// their interval, any other shares one entry ("other addresses").
// Thread-safe.
class RateLimitedLog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RateLimitedLog(std::chrono::milliseconds interval, std::size_t max_sources = 1024)
      : interval_(interval), max_sources_(max_sources) {}

  void log(spdlog::level::level_enum level, const std::string& source, std::string message);

  // Logs the counts whose interval has ended and forgets quiet sources.
  // Returns when the next count is due, if one is pending. Cheap when
  // nothing is due.
  std::optional<Clock::time_point> flush();

  std::chrono::milliseconds interval() const { return interval_; }

 private:
  struct Entry {
    Clock::time_point window_start{};
    std::size_t suppressed = 0;
    spdlog::level::level_enum level = spdlog::level::trace;
    std::string last;
  };
  std::optional<Clock::time_point> sweep(Clock::time_point now);

  std::mutex mutex_;
  std::chrono::milliseconds interval_;
  std::size_t max_sources_;
  std::unordered_map<std::string, Entry> entries_;
  std::optional<Clock::time_point> next_due_;
};

}  // namespace collie
