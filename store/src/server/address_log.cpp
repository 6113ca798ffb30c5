// Rate-limited warnings per client address (address_log.hpp).
#include "address_log.hpp"

namespace collie::store {

void AddressLog::log(spdlog::level::level_enum level, const std::string& address,
                     std::string message) {
  lines_.log(level, address, std::move(message));
  schedule(lines_.flush());
}

void AddressLog::schedule(std::optional<Clock::time_point> due) {
  if (!due || (armed_ && *due >= armed_at_)) return;
  armed_ = true;
  armed_at_ = *due;
  timer_.expires_at(*due);
  timer_.async_wait([this](std::error_code ec) {
    if (ec) return;  // cancelled: re-armed sooner, or stopping
    armed_ = false;
    schedule(lines_.flush());
  });
}

}  // namespace collie::store
