// Store calls and keys in words, for error messages (describe.hpp).
#include "describe.hpp"

#include <fmt/format.h>

namespace collie::store {

std::string printable_key(std::string_view key) {
  constexpr std::size_t kShown = 80;
  std::string out;
  for (std::size_t i = 0; i < key.size() && i < kShown; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (key.size() > kShown) out += fmt::format("... ({} bytes)", key.size());
  return out;
}

std::string describe_call(std::string_view op, std::string_view key) {
  return fmt::format("{}('{}')", op, printable_key(key));
}

std::string describe_call(std::string_view op, std::span<const std::string> keys) {
  constexpr std::size_t kShown = 4;
  std::string list;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    list += fmt::format("{}'{}'", i == 0 ? "" : ", ", printable_key(keys[i]));
  }
  if (keys.size() > kShown) list += fmt::format(", ... {} more", keys.size() - kShown);
  return fmt::format("{}([{}])", op, list);
}

}  // namespace collie::store
