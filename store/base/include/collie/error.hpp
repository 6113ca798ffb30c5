// collie's exception types, shared by every layer (the base layer, under
// the store, the transport, the collectives and the runtime).
//
// Every exception collie throws derives from collie::Error and carries a
// message that names what a user needs to act on it: the operation, the
// peer or address, the key, the sizes, the timeout that ran out.
#pragma once

#include <stdexcept>
#include <string>

namespace collie {

// Base of every collie exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A blocking call ran past its timeout. The object it was called on stays
// usable (a timed-out store wait leaves the connection in a clean state).
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A wait ended early because the process was asked to stop (a signal:
// interrupt.hpp). Collectives that raise it leave their group unusable.
class InterruptedError : public Error {
 public:
  using Error::Error;
};

// A connection could not be made, or the peer closed or reset it.
// The connection is unusable afterwards.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

// The peer refused our credentials, or could not prove its own.
class AuthenticationError : public Error {
 public:
  using Error::Error;
};

// The peer spoke something other than the protocol we expect (wrong magic,
// unsupported version, malformed message).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A call's argument is invalid (a timeout that is not positive, a null
// store, keys and values of different counts). Nothing was done.
class ArgumentError : public Error {
 public:
  using Error::Error;
};

// The request itself is invalid: a key or value over the limit, an add on a
// value that is not an integer, a barrier joined with a different size.
// Nothing was changed; the connection stays usable.
class RequestError : public Error {
 public:
  using Error::Error;
};

// A receive matched a message its sender withdrew part-way (shared memory:
// the sender's call failed and was abandoned, or its send timed out). What
// came of it was dropped; the sender's news of why follows it, if any.
class WithdrawnError : public RequestError {
 public:
  using RequestError::RequestError;
};

// Ranks called different collectives, or the same one with different
// arguments (dtype, count, root, op, algorithm), at the same point of a
// group's sequence. The message names both calls and both ranks.
class MismatchError : public Error {
 public:
  using Error::Error;
};

}  // namespace collie
