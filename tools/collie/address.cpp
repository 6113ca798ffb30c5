#include "address.hpp"

#include <charconv>
#include <cstdlib>

#include <fmt/format.h>

#include <collie/error.hpp>

namespace collie::cli {

std::uint16_t parse_port(const std::string& text, const std::string& what) {
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value > 65535) {
    throw Error(fmt::format("{} '{}' is not a port number (0-65535)", what, text));
  }
  return static_cast<std::uint16_t>(value);
}

HostPort parse_host_port(const std::string& text) {
  HostPort out;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      throw Error(fmt::format("address '{}' is not of the form [ipv6]:port", text));
    }
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw Error(fmt::format("address '{}' is not of the form host:port (or [ipv6]:port)", text));
    }
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  out.port = parse_port(port, fmt::format("the port in address '{}'", text));
  return out;
}

HostPort store_address(const std::string& addr_option) {
  if (!addr_option.empty()) return parse_host_port(addr_option);
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (addr == nullptr || *addr == '\0' || port == nullptr || *port == '\0') {
    throw Error("no store address: pass --addr HOST:PORT, or set MASTER_ADDR and MASTER_PORT");
  }
  return {addr, parse_port(port, "MASTER_PORT")};
}

std::string store_token(const std::string& token_file_option) {
  if (!token_file_option.empty()) return store::read_token_file(token_file_option);
  return store::token_from_environment();
}

}  // namespace collie::cli
