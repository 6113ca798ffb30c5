// The COLLIE_* variables' table, rendered and parsed (environment.hpp).
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include <collie/environment.hpp>
#include <collie/error.hpp>

namespace collie::environment {

namespace {

// "1K", "1G", "300": a limit as the variable's values are written.
std::string written(const Variable& v, double value) {
  if (v.kind == Kind::Bytes) {
    const auto b = static_cast<unsigned long long>(value);
    if (b >= (1ULL << 30) && b % (1ULL << 30) == 0) return fmt::format("{}G", b >> 30);
    if (b >= (1ULL << 20) && b % (1ULL << 20) == 0) return fmt::format("{}M", b >> 20);
    if (b >= (1ULL << 10) && b % (1ULL << 10) == 0) return fmt::format("{}K", b >> 10);
  }
  return fmt::format("{}", value);
}

bool numeric(const Variable& v) {
  return v.kind == Kind::Seconds || v.kind == Kind::Bytes || v.kind == Kind::Integer;
}

// Whether `value` is within the variable's range.
bool within(const Variable& v, double value) {
  if (!std::isfinite(value)) return false;
  if (v.low_excluded ? !(value > v.low) : !(value >= v.low)) return false;
  return v.high < v.low || value <= v.high;
}

}  // namespace

std::string range(const Variable& v) {
  if (!numeric(v)) return std::string(v.accepts);
  const auto low = written(v, v.low);
  if (v.high < v.low) return v.low_excluded ? "more than " + low : low + " or more";
  return fmt::format("{} to {}", low, written(v, v.high));
}

std::string markdown_row(const Variable& v) {
  return fmt::format("| `{}` | {} | {} | {} | {} |", v.name, v.type,
                     v.fallback.empty() ? std::string("-") : fmt::format("`{}`", v.fallback),
                     range(v), v.meaning);
}

std::optional<std::string> get(const Variable& v) {
  const char* value = std::getenv(std::string(v.name).c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::string takes(const Variable& v) {
  if (v.kind == Kind::Choice) return fmt::format("one of {}", v.accepts);
  if (v.kind == Kind::Text) return fmt::format("{} ({})", v.type, v.accepts);
  return fmt::format("{}, {}", v.type, range(v));
}

void refuse(const Variable& v, std::string_view text, std::string_view who) {
  throw Error(
      fmt::format("{}: {}='{}': takes {}{}", who, v.name, text, takes(v),
                  v.fallback.empty() ? std::string() : fmt::format("; default {}", v.fallback)));
}

long long seconds_in_ms(const Variable& v, std::string_view text, std::string_view who) {
  const std::string s(text);
  char* end = nullptr;
  const double value = s.empty() ? NAN : std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !within(v, value)) refuse(v, text, who);
  return static_cast<long long>(std::ceil(value * 1000));
}

std::optional<std::size_t> size_in_bytes(std::string_view text) {
  unsigned long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end == text.data()) return std::nullopt;
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  unsigned long long scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KiB" || unit == "k") scale = 1ULL << 10;
  if (unit == "M" || unit == "MiB" || unit == "m") scale = 1ULL << 20;
  if (unit == "G" || unit == "GiB" || unit == "g") scale = 1ULL << 30;
  if (scale == 0 || value > std::numeric_limits<std::size_t>::max() / scale) return std::nullopt;
  return static_cast<std::size_t>(value * scale);
}

std::size_t bytes(const Variable& v, std::string_view text, std::string_view who) {
  const auto value = size_in_bytes(text);
  if (!value || !within(v, static_cast<double>(*value))) refuse(v, text, who);
  return *value;
}

long long integer(const Variable& v, std::string_view text, std::string_view who) {
  long long value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() ||
      !within(v, static_cast<double>(value)))
    refuse(v, text, who);
  return value;
}

std::string choice(const Variable& v, std::string_view text, std::string_view who) {
  std::string_view words = v.accepts;
  while (!words.empty()) {
    const auto comma = words.find(',');
    const auto word = words.substr(0, comma);
    if (word == text) return std::string(text);
    if (comma == std::string_view::npos) break;
    words.remove_prefix(comma + 1);
    while (!words.empty() && words.front() == ' ')
      words.remove_prefix(1);
  }
  refuse(v, text, who);
}

}  // namespace collie::environment
