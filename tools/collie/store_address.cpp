// What the CLI's subcommands share: store address, token, port files
// (store_address.hpp).
#include "store_address.hpp"

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <unistd.h>

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
  if (auto address = split_host_port(text)) return *address;
  throw Error(
      fmt::format("address '{}' is not of the form host:port or [ipv6]:port (port 0-65535)", text));
}

void write_port_file(const std::string& path, std::uint16_t port) {
  const std::string temporary = fmt::format("{}.tmp.{}", path, getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << port << "\n";
    if (!out.flush()) throw Error(fmt::format("cannot write the port file '{}'", temporary));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw Error(fmt::format("cannot write the port file '{}': {}", path, ec.message()));
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
