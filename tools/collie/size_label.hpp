// "256 KiB", "1.5 MiB": a size in bytes as the CLI's tables, plots and
// explanations print it.
#pragma once

#include <string>

#include <fmt/format.h>

namespace collie::cli {

inline std::string size_label(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return fmt::format("{:g} {}", bytes, kUnits[unit]);
}

}  // namespace collie::cli
