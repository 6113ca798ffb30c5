// A send or receive of the TCP transport, and how it finishes.
//
// A request is Pending until it is Done or Failed, once. Its state is an
// atomic, read without a lock (test(), the spinning waiter); everything else
// is guarded by the connection table's lock (connections.hpp) and may be
// read without it only after the state is final.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include <collie/transport/transport.hpp>

#include "../request_failure.hpp"
#include "wire.hpp"

namespace collie::transport::tcp {

using transport::State;

// Which exception a failed request throws.
using transport::ErrorKind;

struct TcpRequest final : Request {
  TcpRequest(int peer_rank, bool send, Tag request_tag, std::byte* buffer, std::size_t size,
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
  // Guarded by the table's lock.
  std::size_t moved = 0;  // payload bytes
  bool header_built = false;
  std::size_t header_sent = 0;
  std::array<std::uint8_t, wire::kHeaderBytes> header{};
  ErrorKind error_kind = ErrorKind::None;
  std::string error;
};
using TcpRequestPtr = std::shared_ptr<TcpRequest>;

}  // namespace collie::transport::tcp
