// The accepting side of the TCP mesh: accept and run the handshake, refusing
// strangers (listener.hpp).
#include "listener.hpp"

#include <algorithm>
#include <cstring>
#include <span>

#include <asio/error.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/certificates.hpp>
#include <collie/duration.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/transport/interfaces.hpp>

#include "connections.hpp"
#include "sockets.hpp"

namespace collie::transport::tcp {

using Clock = std::chrono::steady_clock;

Listener::Listener(const TransportOptions& options, asio::io_context& io, Connections& table)
    : opt_(options), io_(io), table_(table) {
  // Listens on an ephemeral port of `address`; "" or what went wrong.
  const auto listen_on = [&](const std::string& address) -> std::string {
    std::error_code ec;
    const auto host = asio::ip::make_address(address, ec);
    if (ec) return fmt::format("'{}' is not an IP address ({})", address, ec.message());
    const asio::ip::tcp::endpoint wanted(host, 0);
    asio::ip::tcp::acceptor acceptor(io);
    if (acceptor.open(wanted.protocol(), ec); !ec) acceptor.bind(wanted, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (!ec) acceptor.non_blocking(true, ec);
    if (ec) return ec.message();
    set_close_on_exec(acceptor.native_handle());
    acceptors_.push_back(std::move(acceptor));
    return {};
  };
  if (const auto error = listen_on(options.listen_address); !error.empty()) {
    throw Error(fmt::format("rank {} cannot listen on {}: {}", options.rank, options.listen_address,
                            error));
  }
  address_ = endpoint_text(acceptors_.front().local_endpoint());
  std::vector<std::string> listening{address_};
  for (const auto& lane_address : options.lane_addresses) {
    if (const auto error = listen_on(lane_address); !error.empty()) {
      collie::log().warn("rank {} cannot listen on {} too, for lanes: {}; its lanes leave from {}",
                         options.rank, lane_address, error, options.listen_address);
      continue;
    }
    listening.push_back(endpoint_text(acceptors_.back().local_endpoint()));
  }
  published_ = join_published(listening);
}

Clock::time_point Listener::add_to_poll(std::vector<pollfd>& fds, std::vector<int>& who,
                                        Clock::time_point until) {
  for (auto& acceptor : acceptors_) {
    fds.push_back({acceptor.native_handle(), POLLIN, 0});
    who.push_back(kListening);
  }
  for (std::size_t i = 0; i < handshakes_.size(); ++i) {
    fds.push_back({handshakes_[i].socket.native_handle(), POLLIN, 0});
    who.push_back(kHandshake - static_cast<int>(i));
    until = std::min(until, handshakes_[i].deadline);
  }
  // The count of refusals left out of the log is due then.
  if (const auto due = refusals_.flush()) until = std::min(until, *due);
  return until;
}

void Listener::service(const std::vector<pollfd>& fds, const std::vector<int>& who) {
  const auto now = Clock::now();
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (who[i] == kListening) {
      if ((fds[i].revents & POLLIN) == 0) continue;
      for (auto& acceptor : acceptors_)
        if (acceptor.native_handle() == fds[i].fd) accept_all(acceptor);
    } else if (who[i] <= kHandshake) {
      auto& h = handshakes_[static_cast<std::size_t>(kHandshake - who[i])];
      if (fds[i].revents != 0) {
        step(h);
      } else if (now >= h.deadline) {
        refuse(h,
               fmt::format("it sent no complete handshake within {}",
                           describe_duration(opt_.handshake_timeout)),
               false);
      }
    }
  }
  std::erase_if(handshakes_, [](const Handshake& h) { return h.over; });
}

void Listener::close_all() {
  handshakes_.clear();  // closes their sockets
}

void Listener::accept_all(asio::ip::tcp::acceptor& acceptor) {
  for (;;) {
    asio::ip::tcp::socket socket(io_);
    asio::ip::tcp::endpoint remote;
    std::error_code ec;
    acceptor.accept(socket, remote, ec);
    if (ec) {
      if (ec == asio::error::interrupted || ec == asio::error::connection_aborted) continue;
      if (ec != asio::error::would_block && ec != asio::error::try_again) {
        collie::log().warn("rank {}: accept on {} failed: {}", opt_.rank,
                           endpoint_text(acceptor.local_endpoint(ec)), ec.message());
      }
      return;
    }
    tune(socket, table_.avoid_pacing.load(std::memory_order_relaxed));
    const auto mode = seal::mode_of(opt_.settings.seal);
    const bool seals = seal::seals_connection(mode, seal::same_host(socket.native_handle()));
    Handshake h{std::move(socket),
                endpoint_text(remote),
                {},
                {},
                0,
                Clock::now() + opt_.handshake_timeout,
                false,
                seal::sealing_field(seals, mode, seals && opt_.certificates != nullptr),
                nullptr,
                {},
                0,
                false,
                {},
                {}};
    wire::Challenge challenge{wire::kProtocolVersion,
                              h.sealing,
                              static_cast<std::uint32_t>(opt_.rank),
                              wire::random_nonce(),
                              {}};
    if (seals) {
      h.exchange = std::make_unique<seal::KeyExchange>();
      challenge.key = h.exchange->public_key();
    }
    wire::encode(challenge, h.challenge.data());
    // A fresh socket's buffer takes the challenge whole; anything less is a
    // connection already gone.
    if (h.socket.write_some(asio::buffer(h.challenge), ec) != h.challenge.size() || ec) {
      collie::log().debug("rank {}: the connection from {} went away before its challenge: {}",
                          opt_.rank, h.remote, ec ? ec.message() : "short write");
      continue;
    }
    handshakes_.push_back(std::move(h));
  }
}

namespace {

// `proof`: the acceptor's, sent with an acceptance; `certificate`: its
// certificate proof, after the reason.
void send_verdict(asio::ip::tcp::socket& socket, wire::Verdict verdict, std::string_view reason,
                  const wire::Proof* proof = nullptr,
                  const std::vector<std::uint8_t>* certificate = nullptr) {
  reason = reason.substr(0, wire::kMaxReasonBytes);
  const std::size_t proof_bytes = proof != nullptr ? wire::kProofBytes : 0;
  const std::size_t certificate_bytes = certificate != nullptr ? 2 + certificate->size() : 0;
  std::vector<std::uint8_t> out(wire::kVerdictBytes + proof_bytes + reason.size() +
                                certificate_bytes);
  out[0] = static_cast<std::uint8_t>(verdict);
  out[1] = static_cast<std::uint8_t>((proof != nullptr ? wire::kVerdictProof : 0) |
                                     (certificate != nullptr ? wire::kVerdictCertificate : 0));
  wire::put16(out.data() + 2, static_cast<std::uint16_t>(reason.size()));
  std::uint8_t* at = out.data() + wire::kVerdictBytes;
  if (proof != nullptr) std::memcpy(at, proof->data(), proof_bytes);
  at += proof_bytes;
  std::memcpy(at, reason.data(), reason.size());
  at += reason.size();
  if (certificate != nullptr) {
    wire::put16(at, static_cast<std::uint16_t>(certificate->size()));
    std::memcpy(at + 2, certificate->data(), certificate->size());
  }
  // A fresh connection's buffer takes it whole; a verdict cut short ends
  // the peer's handshake with an error, and the socket closes next.
  std::error_code ignored;
  asio::write(socket, asio::buffer(out), ignored);
}

// The address part of "host:port" ("[::1]:5" -> "::1").
std::string host_of(const std::string& remote) {
  std::string host = remote.substr(0, remote.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return host;
}

}  // namespace

void Listener::refuse(Handshake& h, std::string_view reason, bool answer, std::string_view told) {
  refusals_.log(
      spdlog::level::warn, h.remote.substr(0, h.remote.rfind(':')),
      fmt::format("rank {} refused a connection from {}: {}", opt_.rank, h.remote, reason));
  // The peer hears `told` when given: nothing about this group a stranger
  // could use (its id, its size, this rank's number).
  if (answer) send_verdict(h.socket, wire::Verdict::Refused, told.empty() ? reason : told);
  std::error_code ignored;
  h.socket.close(ignored);
  h.over = true;
}

void Listener::step(Handshake& h) {
  if (h.hello_done) {
    read_certificate(h);
    return;
  }
  std::error_code ec;
  const std::size_t n =
      h.socket.read_some(asio::buffer(h.buffer.data() + h.got, h.buffer.size() - h.got), ec);
  if (ec == asio::error::eof)
    return refuse(h, "it closed the connection during the handshake", false);
  if (ec) {
    if (ec == asio::error::would_block || ec == asio::error::try_again ||
        ec == asio::error::interrupted)
      return;
    return refuse(h, ec.message(), false);
  }
  h.got += n;
  if (h.got >= 4 && !wire::has_magic(h.buffer.data()))
    return refuse(h, "it is not a collie peer (wrong magic bytes)", false);
  if (h.got < h.buffer.size()) return;
  const auto hello = wire::decode_hello(h.buffer.data());
  const auto world = static_cast<std::uint32_t>(opt_.world_size);
  if (hello.version != wire::kProtocolVersion) {
    return refuse(h,
                  fmt::format("it speaks peer protocol version {}, this rank speaks {}",
                              hello.version, wire::kProtocolVersion),
                  true);
  }
  if (hello.group_id != opt_.group_id || hello.world_size != world) {
    return refuse(h,
                  fmt::format("it belongs to another job or group (group id {:016x}, world size "
                              "{}; this is group '{}' id {:016x}, world size {})",
                              hello.group_id, hello.world_size, opt_.group, opt_.group_id, world),
                  true, "it belongs to another job or group");
  }
  if (hello.lane > wire::kMaxLanes) {
    return refuse(h, fmt::format("it asks for lane {} (1 to {} may be opened)", hello.lane,
                                 wire::kMaxLanes),
                  true);
  }
  if (hello.to != static_cast<std::uint32_t>(opt_.rank) || hello.from >= world ||
      hello.from == static_cast<std::uint32_t>(opt_.rank)) {
    return refuse(h,
                  fmt::format("it claims to be rank {} looking for rank {}, but this is rank {}",
                              hello.from, hello.to, opt_.rank),
                  true, "the ranks it names do not fit this connection");
  }
  const bool both_seal = seal::seals(h.sealing) && seal::seals(hello.sealing);
  seal::Key shared{};
  if (both_seal) {
    try {
      shared = h.exchange->shared(hello.key);
    } catch (const Error& e) {
      return refuse(h, fmt::format("its handshake is not valid: {}", e.what()), true);
    }
  }
  const auto keys =
      wire::handshake_keys(opt_.token, h.challenge, std::span(h.buffer.data(), wire::kHelloProofAt),
                           both_seal ? &shared : nullptr);
  h.exchange.reset();  // forgotten: the keys are all it was for
  if (!crypto::digests_equal(hello.proof, keys.connector_proof)) {
    return refuse(h,
                  "wrong token (COLLIE_STORE_TOKEN differs), or the handshake was changed on "
                  "its way",
                  true);
  }
  // Only a rank of the job learns how this one seals.
  if (seal::seals(h.sealing) != seal::seals(hello.sealing)) {
    return refuse(h,
                  fmt::format("rank {} {} and rank {} {}: set COLLIE_SEAL alike on every host",
                              hello.from, seal::describe_sealing(hello.sealing), opt_.rank,
                              seal::describe_sealing(h.sealing)),
                  true);
  }
  if (both_seal && seal::certified(h.sealing) != seal::certified(hello.sealing)) {
    return refuse(h,
                  fmt::format("rank {} {} and rank {} {}: give every host a certificate, or none",
                              hello.from, seal::describe_certified(hello.sealing), opt_.rank,
                              seal::describe_certified(h.sealing)),
                  true);
  }
  if (both_seal && seal::certified(h.sealing)) {
    // The connector's certificate proof follows its hello.
    h.hello_done = true;
    h.hello = hello;
    h.keys = keys;
    read_certificate(h);
    return;
  }
  decide(h, hello, keys.acceptor_proof,
         both_seal
             ? std::make_unique<SealedState>(keys.acceptor_to_connector, keys.connector_to_acceptor)
             : nullptr,
         nullptr);
}

bool Listener::read_certificate(Handshake& h) {
  for (;;) {
    // Its length first, then the proof.
    const std::size_t need =
        h.certificate_got < seal::kProofLengthBytes ? seal::kProofLengthBytes : h.certificate.size();
    if (h.certificate.size() < need) h.certificate.resize(need);
    std::error_code ec;
    const std::size_t n = h.socket.read_some(
        asio::buffer(h.certificate.data() + h.certificate_got, need - h.certificate_got), ec);
    if (ec == asio::error::eof) {
      refuse(h, "it closed the connection during the handshake", false);
      return true;
    }
    if (ec) {
      if (ec == asio::error::would_block || ec == asio::error::try_again ||
          ec == asio::error::interrupted)
        return false;
      refuse(h, ec.message(), false);
      return true;
    }
    h.certificate_got += n;
    if (h.certificate_got < need) return false;
    if (need == seal::kProofLengthBytes) {
      const auto length = seal::proof_length(
          std::span<const std::uint8_t, seal::kProofLengthBytes>(h.certificate.data(), need));
      if (!length.problem.empty()) {
        refuse(h, length.problem, true);
        return true;
      }
      h.certificate.resize(seal::kProofLengthBytes + length.bytes);
      continue;
    }
    break;
  }
  // Checked against the address it connected from, over the challenge and
  // its hello (proof included).
  const auto proof = std::span<const std::uint8_t>(h.certificate).subspan(seal::kProofLengthBytes);
  if (auto why = opt_.certificates->check(
          proof, wire::certificate_transcript(h.challenge, h.buffer), host_of(h.remote));
      !why.empty()) {
    refuse(h, fmt::format("rank {}'s certificate proof fails: {}", h.hello.from, why), true,
           fmt::format("its certificate proof fails: {}", why));
    return true;
  }
  // This side's proof covers the connector's too.
  const auto mine =
      opt_.certificates->prove(wire::certificate_transcript(h.challenge, h.buffer, proof));
  decide(h, h.hello, h.keys.acceptor_proof,
         std::make_unique<SealedState>(h.keys.acceptor_to_connector, h.keys.connector_to_acceptor),
         &mine);
  h.keys = {};
  return true;
}

void Listener::decide(Handshake& h, const wire::Hello& hello, const wire::Proof& proof,
                      std::unique_ptr<SealedState> seal,
                      const std::vector<std::uint8_t>* certificate) {
  std::lock_guard lock(table_.mu);
  auto& p = table_.peer(static_cast<int>(hello.from));
  if (hello.lane > 0) {  // one of its sending lanes: beside the pair's connection
    const bool open = std::any_of(p.in_lanes.begin(), p.in_lanes.end(),
                                  [&](const auto& l) { return l->number == hello.lane; });
    if (p.state == PeerState::Failed) {
      send_verdict(h.socket, wire::Verdict::Refused,
                   fmt::format("rank {} already gave up on rank {}: {}", opt_.rank, hello.from,
                               p.failure));
    } else if (open && p.peer_confirms) {  // a lane it lost, opened again (lane_keeper.hpp)
      send_verdict(h.socket, wire::Verdict::Accepted, "", &proof, certificate);
      p.reopen_in_lane(hello.lane, release(h.socket), std::move(seal));
      table_.wake_pollers();
    } else if (open || p.in_lanes.size() >= wire::kMaxLanes) {
      send_verdict(h.socket, wire::Verdict::Refused,
                   fmt::format("its lane {} is open already", hello.lane));
    } else {
      send_verdict(h.socket, wire::Verdict::Accepted, "", &proof, certificate);
      p.add_in_lane(hello.lane, release(h.socket), std::move(seal));
      table_.wake_pollers();
      collie::log().debug("rank {}: accepted rank {}'s lane {} from {}", opt_.rank, hello.from,
                          hello.lane, h.remote);
    }
    std::error_code ignored;
    if (h.socket.is_open()) h.socket.close(ignored);
    h.over = true;
    return;
  }
  const bool theirs_wins =
      p.state == PeerState::Unconnected ||
      (p.state == PeerState::Connecting && static_cast<int>(hello.from) < opt_.rank);
  if (p.state == PeerState::Failed) {
    send_verdict(
        h.socket, wire::Verdict::Refused,
        fmt::format("rank {} already gave up on rank {}: {}", opt_.rank, hello.from, p.failure));
  } else if (theirs_wins) {
    p.address = h.remote;
    send_verdict(h.socket, wire::Verdict::Accepted, "", &proof, certificate);
    table_.install(p, release(h.socket), std::move(seal));
    collie::log().debug("rank {}: accepted rank {} from {}", opt_.rank, hello.from, h.remote);
  } else {
    send_verdict(h.socket, wire::Verdict::Duplicate, "");
  }
  std::error_code ignored;
  if (h.socket.is_open()) h.socket.close(ignored);
  h.over = true;
}

}  // namespace collie::transport::tcp
