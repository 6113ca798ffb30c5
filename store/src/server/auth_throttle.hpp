// Failed authentication slows its address down: after f recent failures
// (halved every minute without one), each attempt from that address waits
// for its turn, 50 ms x 2^(f-1) apart, at most 2 s apart. An attempt whose
// turn would be more than a few seconds away is refused without a check.
// So guessing a job's secret from one address goes no faster than the
// turns, and the table of addresses stays bounded. Runs on the server's I/O
// thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>

namespace collie::store {

class AuthThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr auto kMaxWait = std::chrono::seconds(5);

  // When the proof of a client from `address` may be checked; nullopt if
  // its turn is more than kMaxWait away.
  std::optional<Clock::time_point> turn(const std::string& address, Clock::time_point now);
  // A proof from `address` was wrong.
  void failed(const std::string& address, Clock::time_point now);

 private:
  struct Entry {
    double failures = 0;
    Clock::time_point last{};
    Clock::time_point next_turn{};
  };
  static constexpr std::size_t kMaxAddresses = 4096;

  static Clock::duration gap(double failures);
  static double failures(const Entry& e, Clock::time_point now);
  void forget_quiet(Clock::time_point now);

  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace collie::store
