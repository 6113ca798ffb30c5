// A raw TCP connection for speaking (or breaking) the store protocol by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include "protocol.hpp"

namespace collie::test {

// A store request frame: the length, then `body`.
inline std::vector<std::uint8_t> frame_of(const std::vector<std::uint8_t>& body) {
  std::vector<std::uint8_t> frame;
  store::wire::Writer(frame).u32(static_cast<std::uint32_t>(body.size()));
  store::wire::Writer(frame).raw(body);
  return frame;
}

class RawConnection {
 public:
  // `source`: the local address to connect from (127.0.0.2 is a second
  // loopback address: another "host" as far as the server's per-address
  // limits can tell).
  explicit RawConnection(std::uint16_t port, const std::string& host = "127.0.0.1",
                         const std::string& source = {});

  void send(std::span<const std::uint8_t> bytes);
  void send(const std::vector<std::uint8_t>& bytes) { send(std::span<const std::uint8_t>(bytes)); }

  // Completes a token-less handshake; returns the server's hello.
  store::wire::ServerHello handshake();

  // A handshake with `token` (empty: none) against a server that requires
  // one: the server's answer to the proof (AuthStatus), or nullopt if it
  // closed the connection or did not answer within `timeout`.
  std::optional<store::wire::AuthStatus> authenticate(const std::string& token,
                                                      std::chrono::milliseconds timeout);

  // Reads exactly n bytes; nullopt if the peer closed first or `timeout` passed.
  std::optional<std::vector<std::uint8_t>> read_exactly(std::size_t n,
                                                        std::chrono::milliseconds timeout);

  // Reads one reply frame's body; nullopt if the peer closed first.
  std::optional<std::vector<std::uint8_t>> read_frame(std::chrono::milliseconds timeout);

  // True if the peer closes the connection within `timeout` (after any data).
  bool closed_by_peer(std::chrono::milliseconds timeout);

  // Bytes the peer sent that wait in this side's socket, unread.
  std::size_t unread() const;

 private:
  asio::io_context io_;
  asio::ip::tcp::socket socket_;
};

}  // namespace collie::test
