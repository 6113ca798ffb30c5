// A store client's handshake (client_connection.hpp): collie's hello, the
// server's limits and version, then, where the store has a token, the
// proof of it both ways (auth.hpp). A store at a connection limit is
// retried like a refusal; anything else that fails it fails the connect,
// saying why.
#include <algorithm>
#include <optional>
#include <vector>

#include <asio/read.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/certificates.hpp>
#include <collie/crypto.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/seal.hpp>

#include "auth.hpp"
#include "client_connection.hpp"

namespace collie::store {

using asio::ip::tcp;

namespace {

// Something listens there: it gets until the connect deadline, and at
// least this long, to answer like a store.
constexpr auto kMinHandshakeTime = std::chrono::seconds(1);

}  // namespace

void AsyncStoreClient::Impl::start_handshake() {
  state_ = State::Handshake;
  std::error_code ignored;
  socket_.set_option(tcp::no_delay(true), ignored);
  // A store whose host is lost fails the client within about 6 s
  // (docs/failures.md), even while it only waits for a reply.
  set_keep_alive(socket_.native_handle(), 2, 1, 4);
  // Something listens there; it gets until the connect deadline (and at
  // least a second) to answer like a store.
  timer_.expires_at(std::max(connect_deadline_, Clock::now() + kMinHandshakeTime));
  proof_sent_ = false;
  timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (ec || self->state_ != State::Handshake) return;
    const auto waited = describe_duration(Clock::now() - self->connect_started_);
    self->connect_failed(Failure{
        Failure::Kind::TimedOut,
        self->proof_sent_
            // A store slows down the proofs of an address that failed lately.
            ? fmt::format("the store at {} did not check this client's token within {}: it "
                          "slows down an address after too many failed attempts from it; "
                          "check that every client has the store's token, and retry later",
                          self->address_, waited)
            : fmt::format("the store at {} accepted the connection but did not complete the "
                          "handshake within {}; is a collie store listening there?",
                          self->address_, waited)});
  });
  sealed_.reset();
  wire::ClientHello hello;
  hello.has_token = !options_.token.empty();
  hello.nonce = auth::random_nonce();
  // A key whenever this side could seal: the store may ask (auth.hpp).
  client_sealing_ = seal::sealing_field(
      auth::wants_seal(hello.has_token, options_.seal, seal::same_host(socket_.native_handle())),
      options_.seal, options_.certificates != nullptr);
  hello.sealing = client_sealing_;
  exchange_.reset();
  if (hello.has_token && options_.seal != seal::Mode::Off) {
    try {
      exchange_ = std::make_unique<seal::KeyExchange>();
      hello.key = exchange_->public_key();
    } catch (const std::exception& e) {
      return connect_failed(
          Failure{Failure::Kind::Connection,
                  fmt::format("cannot make this connection's key: {}", e.what())});
    }
  }
  hello_out_ = wire::encode(hello);
  auto self = shared_from_this();
  asio::async_write(socket_, asio::buffer(hello_out_), [self](std::error_code ec, std::size_t) {
    if (ec) return self->handshake_io_failed(ec);
    asio::async_read(self->socket_,
                     asio::buffer(self->hello_in_.data(), wire::kServerHelloBaseBytes),
                     [self](std::error_code ec2, std::size_t) {
                       if (ec2) return self->handshake_io_failed(ec2);
                       self->on_server_hello_base();
                     });
  });
}

void AsyncStoreClient::Impl::on_server_hello_base() {
  // The rest of the hello only from a store of this version that answers
  // "ok": another's is reported from its base.
  const auto hello = wire::decode_server_hello(hello_in_);
  if (hello.magic != wire::kMagic || hello.version != wire::kVersion ||
      hello.status != wire::HelloStatus::Ok)
    return on_server_hello();
  auto self = shared_from_this();
  asio::async_read(socket_,
                   asio::buffer(hello_in_.data() + wire::kServerHelloBaseBytes,
                                wire::kServerHelloBytes - wire::kServerHelloBaseBytes),
                   [self](std::error_code ec, std::size_t) {
                     if (ec) return self->handshake_io_failed(ec);
                     self->on_server_hello();
                   });
}

void AsyncStoreClient::Impl::handshake_io_failed(std::error_code ec) {
  if (state_ != State::Handshake) return;
  connect_failed(Failure{Failure::Kind::Connection,
                         fmt::format("the store at {} closed the connection during the "
                                     "handshake ({}); is it a collie store of a compatible "
                                     "version, and does it use the same token?",
                                     address_, ec.message())});
}

void AsyncStoreClient::Impl::on_server_hello() {
  const auto hello = wire::decode_server_hello(hello_in_);
  if (hello.magic != wire::kMagic) {
    return connect_failed(
        Failure{Failure::Kind::Protocol,
                fmt::format("{} is not a collie store: it answered the handshake with "
                            "0x{:08x} instead of the store's magic 0x{:08x}",
                            address_, hello.magic, wire::kMagic)});
  }
  if (hello.status == wire::HelloStatus::TooManyConnections ||
      hello.status == wire::HelloStatus::TooManyFromAddress) {
    // The limit may free up: retried until the connect timeout, like a refusal.
    return retry(hello.status == wire::HelloStatus::TooManyConnections
                     ? "the store serves as many connections as its limit allows (collie "
                       "store serve --max-connections)"
                     : "the store serves as many connections from this host's address as "
                       "its limit allows (collie store serve --max-connections-per-address)");
  }
  if (hello.status == wire::HelloStatus::UnsupportedVersion || hello.version != wire::kVersion) {
    return connect_failed(Failure{
        Failure::Kind::Protocol,
        fmt::format("the store at {} speaks protocol version {}, this client speaks version {}; "
                    "use the same collie release on both sides",
                    address_, hello.version, wire::kVersion)});
  }
  if (hello.limits.max_message_bytes < wire::kMinMessageBytes) {
    return connect_failed(
        Failure{Failure::Kind::Protocol,
                fmt::format("the store at {} announced a message limit of {} bytes, below the "
                            "protocol's minimum of {}",
                            address_, hello.limits.max_message_bytes, wire::kMinMessageBytes)});
  }
  limits_ = hello.limits;
  idle_timeout_ = std::chrono::milliseconds(hello.idle_timeout_ms);
  in_.set_max_frame_bytes(limits_.max_message_bytes);
  const bool have_token = !options_.token.empty();
  if (!hello.auth_required) {
    if (have_token) {
      return connect_failed(Failure{
          Failure::Kind::Authentication,
          fmt::format("authentication failed: this client has a token but the store at {} "
                      "does not use one, so it cannot prove who it is; start the store with "
                      "the same token (COLLIE_STORE_TOKEN or --token-file) or unset the "
                      "client's token",
                      address_)});
    }
    return ready();
  }
  server_sealing_ = hello.sealing;
  std::optional<seal::Key> shared;
  if (have_token && auth::sealed(client_sealing_, server_sealing_) &&
      !auth::sealing_differs(client_sealing_, server_sealing_)) {
    try {
      if (!exchange_) throw Error("this client made no key");
      shared = exchange_->shared(hello.key);
    } catch (const std::exception& e) {
      return connect_failed(
          Failure{Failure::Kind::Protocol,
                  fmt::format("the store at {} asked to seal the connection with no valid key ({})",
                              address_, e.what())});
    }
  }
  exchange_.reset();  // forgotten: a token that leaks later opens nothing recorded
  server_proof_ok_ = false;
  proof_out_ = wire::Proof{};
  if (have_token) {
    keys_ =
        auth::handshake_keys(options_.token, hello_out_, hello_in_, shared ? &*shared : nullptr);
    server_proof_ok_ = crypto::digests_equal(hello.proof, keys_.acceptor_proof);
    proof_out_ = keys_.connector_proof;
  }
  // Both prove themselves with certificates (sealed): this client's proof
  // follows its token proof, over both hellos.
  both_certified_ =
      shared.has_value() && seal::certified(client_sealing_) && seal::certified(server_sealing_);
  std::vector<asio::const_buffer> out{asio::buffer(proof_out_)};
  if (both_certified_) {
    certificate_transcript_ = auth::certificate_transcript(hello_out_, hello_in_);
    std::vector<std::uint8_t> mine;
    try {
      mine = options_.certificates->prove(certificate_transcript_);
    } catch (const std::exception& e) {
      return connect_failed(Failure{Failure::Kind::Connection, e.what()});
    }
    certificate_out_ = seal::framed_proof(mine);
    certificate_transcript_.insert(certificate_transcript_.end(), mine.begin(), mine.end());
    out.push_back(asio::buffer(certificate_out_));
  }
  auto self = shared_from_this();
  asio::async_write(socket_, out, [self](std::error_code ec, std::size_t) {
    if (ec) return self->handshake_io_failed(ec);
    self->proof_sent_ = true;
    asio::async_read(self->socket_, asio::buffer(&self->auth_status_, 1),
                     [self](std::error_code ec2, std::size_t) {
                       if (ec2) return self->handshake_io_failed(ec2);
                       self->on_auth_status();
                     });
  });
}

void AsyncStoreClient::Impl::on_auth_status() {
  if (options_.token.empty()) {
    return connect_failed(Failure{
        Failure::Kind::Authentication,
        fmt::format("authentication failed: the store at {} requires a token; set "
                    "COLLIE_STORE_TOKEN (or the client's token option) to the store's token",
                    address_)});
  }
  if (auth_status_ == static_cast<std::uint8_t>(wire::AuthStatus::Throttled)) {
    return connect_failed(Failure{
        Failure::Kind::Authentication,
        fmt::format("authentication refused: the store at {} did not check this client's "
                    "token, because of too many failed attempts from this host's address in "
                    "the last minutes; check that every client has the store's token, and "
                    "retry in a minute",
                    address_)});
  }
  if (auth_status_ == static_cast<std::uint8_t>(wire::AuthStatus::SealingDiffers)) {
    return connect_failed(
        Failure{Failure::Kind::Authentication,
                fmt::format("the store at {} refused this client: it {} and this client {}: set "
                            "COLLIE_SEAL alike on every host",
                            address_, seal::describe_sealing(server_sealing_),
                            seal::describe_sealing(client_sealing_))});
  }
  if (auth_status_ == static_cast<std::uint8_t>(wire::AuthStatus::CertificatesDiffer)) {
    return connect_failed(Failure{
        Failure::Kind::Authentication,
        fmt::format("the store at {} refused this client: the store {} and this client {}: give "
                    "every host a certificate, or none",
                    address_, seal::describe_certified(server_sealing_),
                    seal::describe_certified(client_sealing_))});
  }
  if (auth_status_ == static_cast<std::uint8_t>(wire::AuthStatus::CertificateRefused)) {
    return connect_failed(Failure{
        Failure::Kind::Authentication,
        fmt::format("the store at {} refused this client's certificate ({}); the store's log "
                    "says why",
                    address_, options_.certificates ? options_.certificates->describe() : "")});
  }
  if (auth_status_ != static_cast<std::uint8_t>(wire::AuthStatus::Ok)) {
    return connect_failed(
        Failure{Failure::Kind::Authentication,
                fmt::format("authentication failed: the store at {} refused this client's "
                            "token (the tokens differ)",
                            address_)});
  }
  if (!server_proof_ok_) {
    return connect_failed(
        Failure{Failure::Kind::Authentication,
                fmt::format("authentication failed: the store at {} could not prove that it "
                            "knows the token; refusing to use it",
                            address_)});
  }
  if (auth::sealed(client_sealing_, server_sealing_) && options_.certificates && !both_certified_) {
    return connect_failed(Failure{
        Failure::Kind::Protocol,
        fmt::format("the store at {} did not prove itself with a certificate, and this client "
                    "requires one (COLLIE_SEAL_CERT is set here)",
                    address_)});
  }
  if (both_certified_) {
    auto self = shared_from_this();
    asio::async_read(
        socket_, asio::buffer(certificate_length_), [self](std::error_code ec, std::size_t) {
          if (ec) return self->handshake_io_failed(ec);
          const auto length = seal::proof_length(self->certificate_length_);
          if (!length.problem.empty()) {
            return self->connect_failed(
                Failure{Failure::Kind::Protocol,
                        fmt::format("the store at {}: {}", self->address_, length.problem)});
          }
          self->certificate_in_.resize(length.bytes);
          asio::async_read(self->socket_, asio::buffer(self->certificate_in_),
                           [self](std::error_code ec2, std::size_t) {
                             if (ec2) return self->handshake_io_failed(ec2);
                             self->on_store_certificate();
                           });
        });
    return;
  }
  on_store_certificate();
}

void AsyncStoreClient::Impl::on_store_certificate() {
  if (both_certified_) {
    // The store's certificate must name the host this client dialled.
    const auto host = split_host_port(address_);
    const auto why = options_.certificates->check(certificate_in_, certificate_transcript_,
                                                  host ? host->host : address_);
    certificate_in_ = {};
    certificate_transcript_ = {};
    if (!why.empty()) {
      return connect_failed(
          Failure{Failure::Kind::Protocol,
                  fmt::format("the store at {}: its certificate proof fails: {}", address_, why)});
    }
  }
  // Everything after the status is sealed (or nothing is).
  if (auth::sealed(client_sealing_, server_sealing_))
    sealed_ =
        std::make_unique<SealedChannel>(keys_.connector_to_acceptor, keys_.acceptor_to_connector);
  keys_ = {};  // the channel holds what it needs; no copy outlives the handshake
  ready();
}

}  // namespace collie::store
