// What the CLI's subcommands share: store address, token, port files.
#pragma once

#include <cstdint>
#include <string>

#include <collie/job_config.hpp>
#include <collie/store/client_options.hpp>

namespace collie::cli {

using collie::HostPort;

// collie::split_host_port, or a collie::Error giving the accepted forms.
HostPort parse_host_port(const std::string& text);

// The store address: --addr if given, else MASTER_ADDR and MASTER_PORT.
// Throws collie::Error saying what to set when neither is there.
HostPort store_address(const std::string& addr_option);

// The token: --token-file if given, else COLLIE_STORE_TOKEN, else none.
std::string store_token(const std::string& token_file_option);

// Writes "PORT\n" to `path` atomically (a temporary file, then rename), so
// a script polling for the file never reads half of it.
void write_port_file(const std::string& path, std::uint16_t port);

// Parses a port number, naming `what` in the error.
std::uint16_t parse_port(const std::string& text, const std::string& what);

}  // namespace collie::cli
