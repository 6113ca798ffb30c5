// Durations in collie's one wording (duration.hpp).
#include <fmt/format.h>

#include <collie/duration.hpp>

namespace collie {

std::string describe_duration(std::chrono::milliseconds d) {
  const auto ms = d.count();
  if (ms >= 1000 && ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  if (ms >= 1000) return fmt::format("{:.1f} s", static_cast<double>(ms) / 1000.0);
  return fmt::format("{} ms", ms);
}

}  // namespace collie
