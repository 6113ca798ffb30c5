// Options shared by the store's clients.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <functional>
#include <memory>

#include <collie/certificates.hpp>
#include <collie/seal.hpp>

namespace collie::store {

struct ClientOptions {
  // Default timeout of every call (a call may pass its own).
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
  // How long to keep retrying while the server is not up yet (connection
  // refused, host not resolvable). Unset: the same as `timeout`.
  std::optional<std::chrono::milliseconds> connect_timeout;
  // Shared secret. Empty: no authentication. When set, the client refuses a
  // server that does not prove it knows the same token.
  std::string token;
  // COLLIE_SEAL (docs/security.md, "The sealed wire"): Auto asks to seal a
  // connection to a store on another host (the store may ask too), On
  // every one, Off none (refused by a store that asks). Needs a token.
  seal::Mode seal = seal::Mode::Auto;
  // Certificates (docs/security.md, "Certificates"): where the connection
  // is sealed, this client proves itself with its certificate and requires
  // the store's, which must name the host it dials. Null: the token alone.
  std::shared_ptr<const seal::Certificates> certificates;
  // How long a blocking call polls for its reply before its thread sleeps.
  // A reply that comes within this time costs no wake-up (tens of
  // microseconds on a virtual machine); one that comes later costs this much
  // CPU once. Zero sleeps at once.
  std::chrono::microseconds spin{50};
};

// The token from COLLIE_STORE_TOKEN, else from the file COLLIE_STORE_TOKEN_FILE
// names (read_token_file), else empty; `lookup` reads a variable (getenv's
// view by default: tests pass their own).
std::string token_from_environment(
    const std::function<std::optional<std::string>(std::string_view)>& lookup = {});

// COLLIE_SEAL's setting (auto when unset or another word: the runtime's
// settings check the word itself); `lookup` as above.
seal::Mode seal_from_environment(
    const std::function<std::optional<std::string>(std::string_view)>& lookup = {});

// The certificates COLLIE_SEAL_CERT, COLLIE_SEAL_KEY and COLLIE_SEAL_CA
// name, loaded (once per process for the same files); null where none is
// set. Throws collie::Error if only some are set, or a file is wrong.
std::shared_ptr<const seal::Certificates> certificates_from_environment();

// A fresh secret for one job: 256 random bits, as 64 hex digits.
std::string random_token();

// Reads a token file (trailing whitespace and newlines are dropped).
// Throws collie::Error if it cannot be read or holds nothing.
std::string read_token_file(const std::string& path);

}  // namespace collie::store
