// collie's logger (COLLIE_LOG_LEVEL) and its per-key rate limit (log.hpp).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>

#include <collie/environment.hpp>
#include <collie/log.hpp>

namespace collie {

std::optional<spdlog::level::level_enum> parse_log_level(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "off") return spdlog::level::off;
  if (lower == "error") return spdlog::level::err;
  if (lower == "warn" || lower == "warning") return spdlog::level::warn;
  if (lower == "info") return spdlog::level::info;
  if (lower == "debug") return spdlog::level::debug;
  if (lower == "trace") return spdlog::level::trace;
  return std::nullopt;
}

namespace {

std::shared_ptr<spdlog::logger> make_logger() {
  auto logger = std::make_shared<spdlog::logger>(
      "collie", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  logger->set_pattern("[collie %Y-%m-%d %H:%M:%S.%e pid %P] [%^%l%$] %v");
  logger->set_level(spdlog::level::warn);
  const auto& v = environment::kLogLevel;
  if (const auto text = environment::get(v)) {
    if (auto level = parse_log_level(*text)) {
      logger->set_level(*level);
    } else {
      logger->warn("{}='{}': takes {}; using {}", v.name, *text, environment::takes(v), v.fallback);
    }
  }
  return logger;
}

}  // namespace

spdlog::logger& log() {
  static const std::shared_ptr<spdlog::logger> logger = make_logger();
  return *logger;
}

void set_log_level(spdlog::level::level_enum level) {
  log().set_level(level);
}

void RateLimitedLog::log(spdlog::level::level_enum level, const std::string& source,
                         std::string message) {
  if (!collie::log().should_log(level)) return;
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  std::string key = source;
  if (!entries_.contains(source)) {
    if (entries_.size() >= max_sources_) sweep(now);
    if (entries_.size() >= max_sources_) key = "other addresses";
  }
  Entry& e = entries_[key];
  if (e.suppressed == 0 &&
      (e.window_start == Clock::time_point{} || now - e.window_start >= interval_)) {
    e.window_start = now;
    collie::log().log(level, "{}", message);
    return;
  }
  ++e.suppressed;
  e.level = std::max(e.level, level);
  e.last = std::move(message);
  const auto due = e.window_start + interval_;
  if (!next_due_ || due < *next_due_) next_due_ = due;
}

std::optional<RateLimitedLog::Clock::time_point> RateLimitedLog::flush() {
  std::lock_guard lock(mutex_);
  const auto now = Clock::now();
  if (!next_due_ || now < *next_due_) return next_due_;
  return sweep(now);
}

std::optional<RateLimitedLog::Clock::time_point> RateLimitedLog::sweep(Clock::time_point now) {
  next_due_.reset();
  for (auto it = entries_.begin(); it != entries_.end();) {
    auto& [source, e] = *it;
    const bool ended = now - e.window_start >= interval_;
    if (e.suppressed > 0 && ended) {
      collie::log().log(
          e.level, "{} (and {} more like it from {} in the last {:.1f} s, not logged)", e.last,
          e.suppressed, source, std::chrono::duration<double>(now - e.window_start).count());
      e.suppressed = 0;
      e.window_start = now;
      e.level = spdlog::level::trace;
      e.last.clear();
    } else if (e.suppressed == 0 && ended) {
      it = entries_.erase(it);
      continue;
    } else if (e.suppressed > 0) {
      const auto due = e.window_start + interval_;
      if (!next_due_ || due < *next_due_) next_due_ = due;
    }
    ++it;
  }
  return next_due_;
}

}  // namespace collie
