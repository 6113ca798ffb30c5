// "host:port" parsing and the store-related settings the CLI shares.
#pragma once

#include <cstdint>
#include <string>

#include <collie/store/client_options.hpp>

namespace collie::cli {

struct HostPort {
  std::string host;
  std::uint16_t port = 0;
};

// Parses "host:port", "[v6addr]:port" or "v6addr" with a port after the last
// colon. Throws collie::Error with the accepted forms on anything else.
HostPort parse_host_port(const std::string& text);

// The store address: --addr if given, else MASTER_ADDR and MASTER_PORT.
// Throws collie::Error saying what to set when neither is there.
HostPort store_address(const std::string& addr_option);

// The token: --token-file if given, else COLLIE_STORE_TOKEN, else none.
std::string store_token(const std::string& token_file_option);

// Parses a port number, naming `what` in the error.
std::uint16_t parse_port(const std::string& text, const std::string& what);

}  // namespace collie::cli
