// One client connection of the store server: its handshake, then a stream
// of requests and replies, with limits on what it may hold. Its parts, by
// file:
//
//   session.cpp            framing, requests and replies, back-pressure
//                          (a client that does not read its replies, a
//                          store short of memory), idle and stalled
//                          connections, closing
//   session_handshake.cpp  collie's hello and the token's proof, throttled
//   session_torch.cpp      torch's TCPStore clients (torch_dialect.hpp):
//                          their bytes in, queries turned into requests and
//                          replies rewritten, under the same limits; torch
//                          1.x's silent second connection (torch_callbacks.hpp)
//
// Runs on the server's I/O thread; owned by the ServerCore's session set
// (and by its pending handlers) until closed.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>

#include <collie/log.hpp>

#include "../frame_queue.hpp"
#include "../key_value_state.hpp"
#include "../protocol.hpp"
#include "../sealed_channel.hpp"
#include "../torch_dialect.hpp"
#include "server_core.hpp"

namespace collie::store {

// A frame up to this size is read without asking the memory budget (a
// connection holds at most about twice this much unaccounted).
inline constexpr std::size_t kFreeFrameBytes = 4096;
// A connection whose own replies (owned bytes) pile up past this stops
// taking requests until its client reads.
inline constexpr std::size_t kOwnedBacklog = 256 * 1024;

class Session final : public ReplyTarget, public std::enable_shared_from_this<Session> {
 public:
  using Clock = std::chrono::steady_clock;

  // `refusal`: the limit it is over, if any (it is told so after its hello).
  Session(ServerCore& server, asio::ip::tcp::socket socket, std::string address,
          std::optional<wire::HelloStatus> refusal);

  const std::string& address() const { return address_; }
  bool refusing() const { return refusal_.has_value(); }
  bool in_handshake() const { return phase_ == Phase::Hello || phase_ == Phase::Proof; }
  // Kept open silent for a torch client (torch_callbacks.hpp).
  bool torch_quiet() const { return phase_ == Phase::TorchQuiet; }
  Clock::time_point accepted_at() const { return accepted_at_; }

  // Starts the handshake (and its timer).
  void start();
  void deliver(std::vector<std::uint8_t> frame) override;
  void deliver_pieces(std::vector<Piece> pieces) override;
  // Closes the connection, logging why at `level`; the server forgets it.
  void close(spdlog::level::level_enum level, std::string_view reason);

 private:
  // TorchQuiet: said nothing through the handshake time, and kept open for
  // a torch client (torch_callbacks.hpp); its first byte may still come.
  enum class Phase { Hello, Proof, Ready, Torch, TorchQuiet, Closed };

  void lost(std::error_code ec);
  // Closes the connection if its handshake is not done in the handshake
  // timeout (torch's silent second connection aside: on_silent_handshake).
  void arm_handshake_timer();

  // ---- session_handshake.cpp ----
  void on_first_byte();
  // The hello's base (what every version shares), then its sealing part.
  void on_client_hello_base();
  void on_client_hello();
  // The proof is checked at this address's turn (at once unless it failed
  // recently), so guessing from one address goes no faster than the turns.
  void on_client_proof();
  // Both prove themselves with certificates: the client's proof follows
  // its token proof (length u16, then the proof).
  void read_client_certificate();
  void check_proof();
  template <std::size_t N>
  void send_raw(const std::array<std::uint8_t, N>& bytes) {
    deliver(std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
  }
  void become_ready();

  // ---- session_torch.cpp ----
  // Why this connection may not be served as a torch client, if it may not
  // (the connection limits, loopback only, this server's user only).
  std::optional<std::string> torch_refusal();
  void start_torch();
  // Silent through the handshake time where torch's clients are served:
  // kept as a torch client's callback connection, or closed.
  void on_silent_handshake();
  // Op::Torch on a connection that proved the token: the rest of it is a
  // torch client's (a relay's tunnel).
  void become_torch_tunnel(std::uint32_t id);
  void torch_read();
  void torch_receive();
  // Keeps the memory budget up to date with what the torch buffer holds.
  void torch_account();
  void torch_process();
  void torch_handle(const torch::Query& q);
  // A collie reply frame, rewritten for the torch query it answers.
  void torch_reply(const std::vector<std::uint8_t>& frame);
  // A query begun and then not continued for the handshake timeout holds
  // memory nobody else may use: the connection is closed.
  void torch_watch_stall(Clock::duration after);
  void torch_send(std::vector<std::uint8_t> bytes);

  // ---- session.cpp: idle connections ----
  void arm_idle_timer(Clock::duration after);
  void arm_timer(Clock::duration after);
  void on_idle_timer();

  // ---- session.cpp: requests ----
  // Waits for bytes without holding a buffer: an idle connection costs no memory.
  void read();
  // Calls `then` once bytes can be read: when the socket has some, or at
  // once (posted) when the sealed channel holds plaintext already opened.
  void wait_readable(std::function<void(std::error_code)> then);
  // Reads what is there, through the sealed channel if the connection has
  // one (bad_message: a record failed, sealed_->failure() says how).
  std::size_t read_bytes(std::span<std::uint8_t> into, std::error_code& ec);
  void receive();
  // Part of a request is here (or part of a sealed record).
  bool request_under_way() const;
  // Arms the timer that closes a request under way that stops coming.
  void watch_stall();
  bool taking_requests() const;
  // Handles the complete requests received, then reads on, unless replies
  // have piled up or memory is short (see taking_requests); then reading
  // waits until the writes drain.
  void process();
  // A frame larger than kFreeFrameBytes is received only if the memory
  // budget has room for all of it; otherwise it is answered "the store is
  // full" and its bytes are dropped as they come. True if it was refused
  // (the caller goes on with what follows it).
  bool admit_frame();
  // Keeps the memory budget up to date with what the receive buffer (and
  // the sealed channel) holds.
  void account_input();
  // Keeps the memory budget up to date with what the sealed channel holds.
  void account_sealed();
  // Replies with an error, then closes once it is sent.
  void refuse(std::uint32_t id, std::string reason);
  void write();

  ServerCore& server_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer handshake_timer_;
  asio::steady_timer timer_;  // the proof's turn, then the idle timeout
  std::string peer_;          // address:port, for the log
  std::string address_;       // the address alone, for the limits
  std::optional<wire::HelloStatus> refusal_;
  Clock::time_point accepted_at_ = Clock::now();
  Phase phase_ = Phase::Hello;
  bool first_byte_ = false;  // the connection has said something
  std::array<std::uint8_t, wire::kClientHelloBytes> hello_in_{};
  wire::Proof proof_in_{};
  bool client_has_token_ = false;
  // The handshake's proofs and keys (auth.hpp), both sides' sealing fields,
  // and, once the status byte is out, the channel of a sealed connection.
  seal::SessionKeys keys_{};
  std::uint16_t client_sealing_ = 0;
  std::uint16_t server_sealing_ = 0;
  bool seal_when_written_ = false;  // the status is on its way clear: then seal
  // Certificates (both sides have one, on a sealed connection): the
  // ServerHello as sent (with the client's, what the proofs sign) and the
  // client's certificate proof as it comes.
  bool both_certified_ = false;
  std::array<std::uint8_t, wire::kServerHelloBytes> hello_out_{};
  std::array<std::uint8_t, 2> certificate_length_{};
  std::vector<std::uint8_t> certificate_in_;
  std::unique_ptr<SealedChannel> sealed_;
  std::size_t sealed_counted_ = 0;  // bytes of the budget the channel holds
  wire::FrameBuffer in_;
  std::size_t in_counted_ = 0;  // bytes of the budget the receive buffer holds
  std::size_t skip_ = 0;        // bytes of a refused frame still to drop
  FrameQueue out_;
  Clock::time_point last_activity_{};
  bool stall_armed_ = false;  // the timer watches a request under way
  bool reading_ = false;
  bool close_after_write_ = false;
  // torch's TCPStore clients.
  struct TorchPending {
    torch::Command command;
    std::string expected;  // COMPARE_SET's expected value
  };
  std::optional<torch::Dialect> dialect_;
  std::vector<std::uint8_t> torch_in_;
  std::size_t torch_counted_ = 0;
  std::uint32_t torch_next_id_ = 0;
  std::map<std::uint32_t, TorchPending> torch_pending_;
  std::string close_reason_;
  spdlog::level::level_enum close_level_ = spdlog::level::warn;
};

}  // namespace collie::store
