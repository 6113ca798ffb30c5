// The listening socket and the acceptor's side of the handshake.
//
// The background thread (progress.hpp) polls the acceptor and every
// handshake in progress. An accepted socket gets a challenge at once (magic,
// version, this rank, a fresh nonce); its hello is read without blocking as
// it comes, checked (version, group id and world size, both ranks, the HMAC
// proof), and answered: accepted (the socket becomes the peer's connection
// in the table), duplicate (this rank's own connection to that peer wins:
// the lower rank's is kept) or refused with the reason. Strangers - wrong
// magic, a connection closed half-way, silence past the handshake timeout -
// are closed without a verdict. Every refusal is logged. Used by the
// background thread alone; the table is locked only to admit a peer.
#pragma once

#include <chrono>
#include <poll.h>
#include <string>
#include <vector>

#include <asio/ip/tcp.hpp>

#include <collie/log.hpp>
#include <collie/transport/transport.hpp>

#include "sealed_stream.hpp"
#include "wire.hpp"

namespace collie::transport::tcp {

class Connections;

class Listener {
 public:
  // Listens on an ephemeral port of `options.listen_address`, and of each
  // of `options.lane_addresses` (one that cannot is left out, with a
  // warning). Throws collie::Error naming the address if it cannot listen
  // on the first.
  Listener(const TransportOptions& options, asio::io_context& io, Connections& table);

  // "host:port" it listens on (the advertised address).
  const std::string& address() const { return address_; }
  // What the rank publishes: address(), then each lane address's
  // ",host:port" (join_published(), interfaces.hpp).
  const std::string& published() const { return published_; }

  // Adds the acceptor and the handshakes' sockets to a poll set (`who`:
  // kListening, or kHandshake - i for handshake i); returns the earliest
  // handshake deadline, or `until` if none is sooner.
  static constexpr int kListening = -2;
  static constexpr int kHandshake = -3;
  std::chrono::steady_clock::time_point add_to_poll(std::vector<pollfd>& fds, std::vector<int>& who,
                                                    std::chrono::steady_clock::time_point until);
  // Handles what the poll saw: accepts, reads hellos, decides, and refuses
  // handshakes past their deadline.
  void service(const std::vector<pollfd>& fds, const std::vector<int>& who);

  // Closes the sockets of unfinished handshakes.
  void close_all();

 private:
  struct Handshake {
    asio::ip::tcp::socket socket;
    std::string remote;
    std::array<std::uint8_t, wire::kChallengeBytes> challenge{};  // as sent: the transcript's start
    std::array<std::uint8_t, wire::kHelloBytes> buffer{};
    std::size_t got = 0;
    std::chrono::steady_clock::time_point deadline;
    bool over = false;
    std::uint16_t sealing = 0;  // this side's, as the challenge says
    std::unique_ptr<seal::KeyExchange> exchange;  // when this side seals it
    // Both prove themselves with certificates: after the hello, the
    // connector's proof (length u16, then the proof) is read here, and the
    // hello's outcome waits for it.
    std::vector<std::uint8_t> certificate;
    std::size_t certificate_got = 0;
    bool hello_done = false;
    wire::Hello hello{};
    seal::SessionKeys keys{};
  };

  void accept_all(asio::ip::tcp::acceptor& acceptor);
  void step(Handshake& h);  // reads what came; decides once the hello is whole
  // The connector's certificate proof, read after its hello: true once it
  // is whole (or the handshake was refused).
  bool read_certificate(Handshake& h);
  // `seal`: the connection's records, when both sides seal it;
  // `certificate`: this side's proof, sent after the verdict, when both
  // prove themselves with certificates.
  void decide(Handshake& h, const wire::Hello& hello, const wire::Proof& proof,
              std::unique_ptr<SealedState> seal, const std::vector<std::uint8_t>* certificate);
  // Logs `reason` and closes; `answer`: tells the peer `told` (or `reason`
  // when `told` is empty) first.
  void refuse(Handshake& h, std::string_view reason, bool answer, std::string_view told = {});

  const TransportOptions& opt_;
  asio::io_context& io_;
  Connections& table_;
  std::vector<asio::ip::tcp::acceptor> acceptors_;  // the advertised address's first
  std::string address_;
  std::string published_;
  std::vector<Handshake> handshakes_;
  // Refusals, at most one line per address every 10 s (a stranger's flood
  // does not flood the rank's log).
  RateLimitedLog refusals_{std::chrono::seconds(10)};
};

}  // namespace collie::transport::tcp
