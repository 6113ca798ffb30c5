// What a key counted by add() holds, for every store (the server's state,
// the file store and the etcd store): the whole text a decimal int64.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string_view>

namespace collie::store {

// The counter `text` holds, or nothing where it is empty or not wholly a
// decimal int64.
inline std::optional<std::int64_t> parse_counter(std::string_view text) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace collie::store
