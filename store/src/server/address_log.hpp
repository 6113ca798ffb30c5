// The server's warnings about one client address, at most one line per
// interval (RateLimitedLog, log.hpp): a stranger that connects a thousand
// times a second fills no disk. A timer logs how many lines were left out
// when their interval ends. Runs on the server's I/O thread.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include <collie/log.hpp>

namespace collie::store {

class AddressLog {
 public:
  AddressLog(asio::io_context& io, std::chrono::milliseconds interval)
      : timer_(io), lines_(interval) {}

  void log(spdlog::level::level_enum level, const std::string& address, std::string message);
  void cancel() { timer_.cancel(); }

 private:
  using Clock = std::chrono::steady_clock;
  void schedule(std::optional<Clock::time_point> due);

  asio::steady_timer timer_;
  RateLimitedLog lines_;
  bool armed_ = false;
  Clock::time_point armed_at_{};
};

}  // namespace collie::store
