// What every backend's requests share: the state a request goes through,
// the fields every send and receive has, the kinds of failure and the
// exception each throws, and the words messages use for them. Internal to
// transport/src.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <collie/transport/transport.hpp>

namespace collie::transport {

enum class State : int { Pending = 0, Done = 1, Failed = 2 };

// Which exception a failed request throws.
enum class ErrorKind { None, Connection, Protocol, Request, Withdrawn, Timeout };

// A send or receive of a backend. Pending until Done or Failed, once. The
// state is an atomic, read without a lock (test(), a spinning waiter);
// everything else is guarded by the backend's lock and may be read without
// it only after the state is final.
struct RequestState : Request {
  RequestState(int peer_rank, bool send, Tag request_tag, std::byte* buffer, std::size_t size,
               std::uint64_t print)
      : Request(peer_rank),
        is_send(send),
        tag(request_tag),
        data(buffer),
        bytes(size),
        fingerprint(print) {}

  bool pending() const {
    return state.load(std::memory_order_acquire) == static_cast<int>(State::Pending);
  }

  const bool is_send;
  const Tag tag;
  std::byte* const data;  // null for a consuming receive
  const std::size_t bytes;
  Consumer consume;               // a receive that hands its payload over instead of copying it
  std::uint64_t fingerprint = 0;  // send: attached; receive: the sender's
  std::atomic<int> state{static_cast<int>(State::Pending)};
  std::size_t moved = 0;  // payload bytes
  ErrorKind error_kind = ErrorKind::None;
  std::string error;
};

// The index of the first of `requests` (every backend's RequestState) that
// is no longer pending, or -1: what wait_any waits for.
inline int first_finished(std::span<const RequestPtr> requests) {
  for (std::size_t i = 0; i < requests.size(); ++i)
    if (!static_cast<const RequestState&>(*requests[i]).pending()) return static_cast<int>(i);
  return -1;
}

// Throws the exception of `kind` with `message`: TimeoutError (or
// InterruptedError when the wait was interrupted), ProtocolError,
// RequestError, else ConnectionError.
[[noreturn]] void throw_failure(ErrorKind kind, const std::string& message, bool interrupted);

// "1 byte", "4096 bytes".
std::string plural_bytes(std::size_t n);

// The words of every backend's messages, so that they read alike:
// "rank 0: recv from <peer> (tag 5, 100 bytes)".
std::string request_text(int rank, const RequestState& r, const std::string& peer);
// "10 of 100 bytes received".
std::string progress_text(const RequestState& r);
// A receive met a message of another size under its tag.
std::string size_mismatch_text(const std::string& request, const std::string& peer,
                               std::size_t sent, std::size_t expected);
// A wait gave up on `request`: its time (`limit`, 0 when the caller says
// how long itself) ran out, or signal `signal` interrupted it.
std::string timeout_text(const std::string& request, const std::string& progress,
                         std::chrono::milliseconds limit, int signal);
// Said of a receive that waits behind a message the full unexpected-message
// queue cannot take.
std::string paused_text(const std::string& peer, std::size_t held, std::size_t limit);

}  // namespace collie::transport
