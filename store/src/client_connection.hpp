// One asynchronous store client's connection (AsyncStoreClient::Impl,
// async_client.hpp): connecting with retries until the connect timeout,
// the handshake (client_handshake.cpp), then requests out and replies
// dispatched to their handlers, in order (client_connection.cpp). A
// connection the server closed as idle is replaced before the next
// request. Runs on its io_context's thread; owned by its AsyncStoreClient
// and by its pending handlers.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <collie/store/async_client.hpp>

#include "frame_queue.hpp"
#include "protocol.hpp"
#include "sealed_channel.hpp"

namespace collie::store {

// Decodes a successful reply's payload (reader set) or reports a failure
// (failure set), then calls the user's handler.
using Decoder = std::function<void(const Failure*, wire::Reader*)>;

class AsyncStoreClient::Impl : public std::enable_shared_from_this<Impl> {
 public:
  using Clock = std::chrono::steady_clock;

  Impl(asio::io_context& io, ClientOptions options);

  void connect(std::string host, std::uint16_t port, Handler<Done> done);
  // Sends `request` (its id assigned here); `decoder` gets its reply.
  RequestId send(wire::Request& request, Decoder decoder);
  void abandon(RequestId id);
  void close();
  int duplicate_socket();
  std::unique_ptr<SealedChannel> release_sealed() { return std::move(sealed_); }

  const std::string& address() const { return address_; }
  const StoreLimits& limits() const { return limits_; }
  const ClientOptions& options() const { return options_; }

 private:
  // Resting: the server closed the connection as idle; the next request
  // reconnects first.
  enum class State { Idle, Connecting, Handshake, Ready, Resting, Broken };
  struct Pending {
    wire::Op op;
    Decoder decoder;
  };

  std::string not_ready_reason() const;
  void fail_later(Decoder decoder, Failure failure);

  // ---- connecting (client_connection.cpp) ----
  void attempt();
  // Exponential backoff from 10 ms to 1 s, with jitter, until the deadline.
  void retry(const std::string& error);
  void connect_failed(Failure failure);
  // A fresh connection (and handshake) in place of an idle one; requests
  // sent meanwhile are held and go out once it is ready.
  void reconnect();
  void ready();

  // ---- the handshake (client_handshake.cpp) ----
  void start_handshake();
  void handshake_io_failed(std::error_code ec);
  // The hello's base (what every version shares), then its sealing part.
  void on_server_hello_base();
  void on_server_hello();
  void on_auth_status();
  // Both prove themselves with certificates: the store's proof follows
  // its status byte; checked, then the connection is ready.
  void on_store_certificate();

  // ---- requests and replies (client_connection.cpp) ----
  void enqueue(std::vector<std::uint8_t> frame);
  void write();
  void read();
  // read() on a sealed connection: plaintext through the channel.
  void read_sealed();
  // A read that ended the connection (eof, an error, a broken record).
  void read_failed(std::error_code ec);
  // A send that failed: the store may have said why before it closed, so
  // the read in flight gets a moment to find that first.
  void send_failed(std::error_code ec);
  // Handles every complete reply received; false if the connection broke
  // (or a handler closed it).
  bool dispatch();
  // The server closed the connection as idle: nothing was lost.
  void rest();
  void fail(std::string reason, Failure::Kind kind = Failure::Kind::Connection);

  asio::io_context& io_;
  ClientOptions options_;
  asio::ip::tcp::socket socket_;
  asio::ip::tcp::resolver resolver_;
  asio::steady_timer timer_;
  StoreLimits limits_;
  wire::FrameBuffer in_;
  FrameQueue out_;
  State state_ = State::Idle;
  std::string broken_reason_;
  std::string send_error_;  // set once a send failed on this connection

  std::string host_;
  std::uint16_t port_ = 0;
  std::string address_;
  Handler<Done> on_connected_;
  Clock::time_point connect_started_;
  Clock::time_point connect_deadline_;
  int attempts_ = 0;
  std::string last_error_;  // the last attempt's that said why it failed
  std::chrono::duration<double, std::milli> backoff_{10.0};
  std::minstd_rand random_{std::random_device{}()};

  std::array<std::uint8_t, wire::kClientHelloBytes> hello_out_{};
  std::array<std::uint8_t, wire::kServerHelloBytes> hello_in_{};
  wire::Proof proof_out_{};
  std::uint8_t auth_status_ = 0;
  bool server_proof_ok_ = false;
  bool proof_sent_ = false;  // waiting for the store's verdict on it
  // Sealing (auth.hpp): the ephemeral key until the store's hello, both
  // sides' fields, the handshake's keys, and the channel once proved.
  std::unique_ptr<seal::KeyExchange> exchange_;
  std::uint16_t client_sealing_ = 0;
  std::uint16_t server_sealing_ = 0;
  seal::SessionKeys keys_{};
  std::unique_ptr<SealedChannel> sealed_;
  // Certificates (both sides have one, on a sealed connection): this
  // client's proof as sent (length u16, then the proof), the transcript
  // the store's proof signs, and the store's proof as it comes.
  bool both_certified_ = false;
  std::vector<std::uint8_t> certificate_out_;
  std::vector<std::uint8_t> certificate_transcript_;
  std::array<std::uint8_t, 2> certificate_length_{};
  std::vector<std::uint8_t> certificate_in_;

  RequestId next_id_ = 1;
  std::unordered_map<RequestId, Pending> pending_;

  // Idle connections (see send()).
  Clock::duration idle_timeout_{};
  Clock::time_point last_io_{};
  bool reconnecting_ = false;
  std::vector<std::pair<RequestId, std::vector<std::uint8_t>>> held_;
  std::uint64_t generation_ = 0;  // of the connection; handlers of older ones do nothing
};

}  // namespace collie::store
