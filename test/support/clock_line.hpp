// The "(clock C ms)" a test worker prints in a line: its monotonic clock
// in milliseconds, which every process of a host shares, so a test can set
// one rank's time of death beside another's time of failure.
#pragma once

#include <optional>
#include <sstream>
#include <string>

namespace collie::test {

inline std::optional<long long> clock_of(const std::string& line) {
  const auto at = line.find("(clock ");
  if (at == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(at + 7));
  long long ms = -1;
  if (!(in >> ms)) return std::nullopt;
  return ms;
}

}  // namespace collie::test
