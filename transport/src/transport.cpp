// What every backend shares: peer checks, the exceptions of failed
// requests, the words of their messages (request_state.hpp), and the mark
// of threads that wait for others.
#include <fmt/format.h>

#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/interrupt.hpp>
#include <collie/transport/transport.hpp>

#include "request_state.hpp"

namespace collie::transport {

namespace {
thread_local bool marked_waits_for_others = false;
}  // namespace

void set_waits_for_others(bool on) {
  marked_waits_for_others = on;
}

bool waits_for_others() {
  return marked_waits_for_others;
}

void check_peer(int rank, int world_size, int peer, std::string_view op) {
  if (peer >= 0 && peer < world_size) return;
  throw Error(fmt::format("rank {}: {} rank {}: rank {} is not in the group (ranks 0 to {})", rank,
                          op, peer, peer, world_size - 1));
}

void throw_failure(ErrorKind kind, const std::string& message, bool interrupted) {
  switch (kind) {
    case ErrorKind::Timeout:
      if (interrupted) throw InterruptedError(message);
      throw TimeoutError(message);
    case ErrorKind::Protocol:
      throw ProtocolError(message);
    case ErrorKind::Request:
      throw RequestError(message);
    case ErrorKind::Withdrawn:
      throw WithdrawnError(message);
    default:
      throw ConnectionError(message);
  }
}

std::string plural_bytes(std::size_t n) {
  return fmt::format("{} byte{}", n, n == 1 ? "" : "s");
}

std::string request_text(int rank, const RequestState& r, const std::string& peer) {
  return fmt::format("rank {}: {} {} {} (tag {}, {})", rank, r.is_send ? "send" : "recv",
                     r.is_send ? "to" : "from", peer, r.tag, plural_bytes(r.bytes));
}

std::string progress_text(const RequestState& r) {
  return fmt::format("{} of {} {}", r.moved, plural_bytes(r.bytes),
                     r.is_send ? "sent" : "received");
}

std::string size_mismatch_text(const std::string& request, const std::string& peer,
                               std::size_t sent, std::size_t expected) {
  return fmt::format("{} failed: {} sent a message of {} with this tag; the receive expected {} "
                     "(the message was dropped)",
                     request, peer, plural_bytes(sent), plural_bytes(expected));
}

std::string timeout_text(const std::string& request, const std::string& progress,
                         std::chrono::milliseconds limit, int signal) {
  if (signal != 0)
    return fmt::format("{} was interrupted: the process was asked to stop ({}) ({})", request,
                       signal_name(signal), progress);
  return fmt::format("{} timed out{} ({})", request,
                     limit.count() > 0 ? " after " + describe_duration(limit) : std::string(),
                     progress);
}

std::string paused_text(const std::string& peer, std::size_t held, std::size_t limit) {
  return fmt::format(
      "; reads from {} are paused: the unexpected-message queue is full ({} held, limit {})",
      peer, plural_bytes(held), plural_bytes(limit));
}

}  // namespace collie::transport
