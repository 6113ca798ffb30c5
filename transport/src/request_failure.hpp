// What every backend's requests share: the states a request goes through,
// the kinds of failure, the exception each kind throws, and how bytes are
// counted in messages. Internal to transport/src.
#pragma once

#include <cstddef>
#include <string>

namespace collie::transport {

enum class State : int { Pending = 0, Done = 1, Failed = 2 };

// Which exception a failed request throws.
enum class ErrorKind { None, Connection, Protocol, Request, Timeout };

// Throws the exception of `kind` with `message`: TimeoutError (or
// InterruptedError when the wait was interrupted), ProtocolError,
// RequestError, else ConnectionError.
[[noreturn]] void throw_failure(ErrorKind kind, const std::string& message, bool interrupted);

// "1 byte", "4096 bytes".
std::string plural_bytes(std::size_t n);

}  // namespace collie::transport
