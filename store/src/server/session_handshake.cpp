// A store connection's handshake (session.hpp): one byte tells collie's
// hello from a torch client's query; the hello's version and the
// connection limits; then, where the server has a token, the proof of it
// both ways, checked at the client address's turn (auth_throttle.hpp).
#include <algorithm>
#include <vector>

#include <asio/read.hpp>
#include <fmt/format.h>

#include <collie/certificates.hpp>
#include <collie/crypto.hpp>

#include "../auth.hpp"
#include "session.hpp"

namespace collie::store {

void Session::on_first_byte() {
  first_byte_ = true;
  if (phase_ == Phase::TorchQuiet) {
    // A kept silent connection speaks at last: its handshake has its
    // time again, from now.
    phase_ = Phase::Hello;
    server_.torch_callbacks().quiet_ended(address_);
    arm_handshake_timer();
  }
  if (hello_in_[0] != static_cast<std::uint8_t>(wire::kMagic >> 24)) {
    if (server_.options().torch_clients) return start_torch();
    return close(spdlog::level::warn,
                 fmt::format("refused: not a collie store client (its first byte is 0x{:02x}, "
                             "not 0x{:02x} as collie's magic){}",
                             hello_in_[0], wire::kMagic >> 24,
                             hello_in_[0] <= 13 ? "; a torch TCPStore client? " +
                                                      server_.options().torch_refusal_hint
                                                : std::string()));
  }
  asio::async_read(socket_, asio::buffer(hello_in_.data() + 1, wire::kClientHelloBaseBytes - 1),
                   [self = shared_from_this()](std::error_code ec, std::size_t) {
                     if (ec) return self->lost(ec);
                     self->on_client_hello_base();
                   });
}

void Session::on_client_hello_base() {
  // The rest of the hello only where its version is this server's: another
  // version's is answered with this server's version, as its base says.
  const auto hello = wire::decode_client_hello(hello_in_);
  if (hello.magic != wire::kMagic || hello.version != wire::kVersion || refusal_)
    return on_client_hello();
  asio::async_read(socket_,
                   asio::buffer(hello_in_.data() + wire::kClientHelloBaseBytes,
                                wire::kClientHelloBytes - wire::kClientHelloBaseBytes),
                   [self = shared_from_this()](std::error_code ec, std::size_t) {
                     if (ec) return self->lost(ec);
                     self->on_client_hello();
                   });
}

void Session::on_client_hello() {
  const auto hello = wire::decode_client_hello(hello_in_);
  if (hello.magic != wire::kMagic) {
    return close(spdlog::level::warn,
                 fmt::format("refused: not a collie store client (it sent 0x{:08x}, not the "
                             "magic 0x{:08x})",
                             hello.magic, wire::kMagic));
  }
  wire::ServerHello reply;
  reply.limits = server_.options().limits;
  reply.idle_timeout_ms = static_cast<std::uint32_t>(
      std::min<std::int64_t>(server_.options().idle_timeout.count(), UINT32_MAX));
  if (refusal_) {
    reply.status = *refusal_;
    close_after_write_ = true;
    close_reason_ = *refusal_ == wire::HelloStatus::TooManyConnections
                        ? fmt::format("refused: the server has {} connections, its limit",
                                      server_.options().max_connections)
                        : fmt::format(
                              "refused: {} connections from {} already, the limit per "
                              "address",
                              server_.options().max_connections_per_address, address_);
    send_raw(wire::encode(reply));
    return;
  }
  if (hello.version != wire::kVersion) {
    reply.status = wire::HelloStatus::UnsupportedVersion;
    close_after_write_ = true;
    close_reason_ = fmt::format("refused: protocol version {} (this server speaks {})",
                                hello.version, wire::kVersion);
    send_raw(wire::encode(reply));
    return;
  }
  client_has_token_ = hello.has_token;
  const std::string& token = server_.options().token;
  reply.auth_required = !token.empty();
  reply.nonce = auth::random_nonce();
  // Sealed when either side asks (auth.hpp); a side that is off makes it
  // a refusal, after the proofs, so that a stranger learns nothing.
  const auto mode = server_.options().seal;
  client_sealing_ = hello.sealing;
  server_sealing_ = seal::sealing_field(
      auth::wants_seal(reply.auth_required, mode, seal::same_host(socket_.native_handle())), mode,
      server_.options().certificates != nullptr);
  reply.sealing = server_sealing_;
  // (A client without a token fails its proof: nothing to seal then.)
  const bool sealed = reply.auth_required && hello.has_token &&
                      auth::sealed(client_sealing_, server_sealing_) &&
                      !auth::sealing_differs(client_sealing_, server_sealing_);
  std::optional<seal::Key> shared;
  if (sealed) {
    try {
      const seal::KeyExchange exchange;
      reply.key = exchange.public_key();
      shared = exchange.shared(hello.key);
    } catch (const std::exception& e) {
      return close(spdlog::level::warn,
                   fmt::format("refused: the connection is to be sealed, and its hello "
                               "carries no valid X25519 key ({})",
                               e.what()));
    }
  }
  if (reply.auth_required) {
    keys_ =
        auth::handshake_keys(token, hello_in_, wire::encode(reply), shared ? &*shared : nullptr);
    reply.proof = keys_.acceptor_proof;
  }
  hello_out_ = wire::encode(reply);
  send_raw(hello_out_);
  if (!reply.auth_required) return become_ready();
  phase_ = Phase::Proof;
  both_certified_ = sealed && seal::certified(client_sealing_) && seal::certified(server_sealing_);
  asio::async_read(socket_, asio::buffer(proof_in_),
                   [self = shared_from_this()](std::error_code ec, std::size_t) {
                     if (ec) return self->lost(ec);
                     if (self->both_certified_) return self->read_client_certificate();
                     self->on_client_proof();
                   });
}

void Session::read_client_certificate() {
  asio::async_read(
      socket_, asio::buffer(certificate_length_),
      [self = shared_from_this()](std::error_code ec, std::size_t) {
        if (ec) return self->lost(ec);
        const auto length = seal::proof_length(self->certificate_length_);
        if (!length.problem.empty())
          return self->close(spdlog::level::warn, "refused: " + length.problem);
        self->certificate_in_.resize(length.bytes);
        asio::async_read(self->socket_, asio::buffer(self->certificate_in_),
                         [self](std::error_code ec2, std::size_t) {
                           if (ec2) return self->lost(ec2);
                           self->on_client_proof();
                         });
      });
}

void Session::on_client_proof() {
  const auto now = Clock::now();
  const auto turn = server_.throttle().turn(address_, now);
  if (!turn) {
    server_.count_auth_failure();
    close_after_write_ = true;
    close_reason_ = fmt::format(
        "refused unchecked: too many failed authentications from {} in the last minutes", address_);
    send_raw(std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::Throttled)});
    return;
  }
  if (*turn <= now) return check_proof();
  timer_.expires_at(*turn);
  timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (!ec && self->phase_ == Phase::Proof) self->check_proof();
  });
}

void Session::check_proof() {
  seal_when_written_ = false;
  const auto& expected = keys_.connector_proof;
  if (!client_has_token_ || !crypto::digests_equal(proof_in_, expected)) {
    server_.count_auth_failure();
    server_.throttle().failed(address_, Clock::now());
    close_after_write_ = true;
    close_reason_ = fmt::format("refused: authentication failed ({})",
                                client_has_token_ ? "wrong token" : "the client has no token");
    send_raw(std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::Failed)});
    return;
  }
  if (auth::sealing_differs(client_sealing_, server_sealing_)) {
    close_after_write_ = true;
    close_reason_ = fmt::format(
        "refused: it {} and this store {}: set COLLIE_SEAL alike on every host",
        seal::describe_sealing(client_sealing_), seal::describe_sealing(server_sealing_));
    send_raw(
        std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::SealingDiffers)});
    return;
  }
  const bool sealed = auth::sealed(client_sealing_, server_sealing_);
  if (sealed && seal::certified(client_sealing_) != seal::certified(server_sealing_)) {
    close_after_write_ = true;
    close_reason_ = fmt::format(
        "refused: it {} and this store {}: give every host a "
        "certificate, or none",
        seal::describe_certified(client_sealing_), seal::describe_certified(server_sealing_));
    send_raw(std::array<std::uint8_t, 1>{
        static_cast<std::uint8_t>(wire::AuthStatus::CertificatesDiffer)});
    return;
  }
  if (both_certified_) {
    // The client's certificate must name the address it comes from; the
    // store's proof, after the status, covers the client's too.
    auto transcript = auth::certificate_transcript(hello_in_, hello_out_);
    const auto why = server_.options().certificates->check(certificate_in_, transcript, address_);
    if (!why.empty()) {
      server_.count_auth_failure();
      close_after_write_ = true;
      close_reason_ = "refused: its certificate proof fails: " + why;
      send_raw(std::array<std::uint8_t, 1>{
          static_cast<std::uint8_t>(wire::AuthStatus::CertificateRefused)});
      return;
    }
    transcript.insert(transcript.end(), certificate_in_.begin(), certificate_in_.end());
    const auto mine = server_.options().certificates->prove(transcript);
    std::vector<std::uint8_t> out{static_cast<std::uint8_t>(wire::AuthStatus::Ok)};
    const auto framed = seal::framed_proof(mine);
    out.insert(out.end(), framed.begin(), framed.end());
    certificate_in_ = {};
    deliver(std::move(out));
  } else {
    send_raw(std::array<std::uint8_t, 1>{static_cast<std::uint8_t>(wire::AuthStatus::Ok)});
  }
  // A sealed connection is ready once the status is out (write()).
  seal_when_written_ = sealed;
  if (!seal_when_written_) become_ready();
}

void Session::become_ready() {
  phase_ = Phase::Ready;
  handshake_timer_.cancel();
  std::error_code ignored;
  socket_.non_blocking(true, ignored);
  log().debug("store: {} connected", peer_);
  last_activity_ = Clock::now();
  arm_idle_timer(server_.options().idle_timeout);
  read();
}

}  // namespace collie::store
