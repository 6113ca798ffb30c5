// The authentication throttle's turns (auth_throttle.hpp).
#include "auth_throttle.hpp"

#include <algorithm>
#include <cmath>

namespace collie::store {

std::optional<AuthThrottle::Clock::time_point> AuthThrottle::turn(const std::string& address,
                                                                  Clock::time_point now) {
  auto it = entries_.find(address);
  if (it == entries_.end()) return now;
  Entry& e = it->second;
  const double f = failures(e, now);
  if (f < 0.5 && e.next_turn <= now) {
    entries_.erase(it);
    return now;
  }
  const auto at = std::max(now, e.next_turn);
  if (at - now > kMaxWait) return std::nullopt;
  e.next_turn = at + gap(f);
  return at;
}

void AuthThrottle::failed(const std::string& address, Clock::time_point now) {
  if (!entries_.contains(address) && entries_.size() >= kMaxAddresses) forget_quiet(now);
  Entry& e = entries_[address];
  e.failures = failures(e, now) + 1;
  e.last = now;
  e.next_turn = std::max(e.next_turn, now + gap(e.failures));
}

AuthThrottle::Clock::duration AuthThrottle::gap(double failures) {
  if (failures < 0.5) return Clock::duration::zero();
  const double ms = 50.0 * std::pow(2.0, std::max(0.0, failures - 1.0));
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(std::min(ms, 2000.0)));
}

double AuthThrottle::failures(const Entry& e, Clock::time_point now) {
  const double minutes = std::chrono::duration<double>(now - e.last).count() / 60.0;
  return e.failures * std::pow(0.5, minutes);
}

void AuthThrottle::forget_quiet(Clock::time_point now) {
  std::erase_if(entries_, [&](const auto& kv) { return failures(kv.second, now) < 1; });
  // Still full (failures from very many addresses): the oldest go.
  while (entries_.size() >= kMaxAddresses) {
    auto oldest = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->second.last < oldest->second.last) oldest = it;
    entries_.erase(oldest);
  }
}

}  // namespace collie::store
