// The connecting side of the TCP mesh: connect and handshake with a
// deadline, the pair's connection and its lanes (connector.hpp).
#include "connector.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include <asio/connect.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>
#include <fmt/format.h>

#include <collie/address.hpp>
#include <collie/certificates.hpp>
#include <collie/crypto.hpp>
#include <collie/error.hpp>
#include <collie/log.hpp>
#include <collie/seal.hpp>
#include <collie/transport/interfaces.hpp>

#include "connections.hpp"
#include "sockets.hpp"

namespace collie::transport::tcp {

using Clock = std::chrono::steady_clock;

namespace {

// Runs the one asynchronous operation `start` begins on `socket` until it
// completes or `deadline` passes; then it is cancelled and reported as
// timed_out.
template <class Start>
std::error_code run_until(asio::io_context& io, asio::ip::tcp::socket& socket,
                          Clock::time_point deadline, Start start) {
  std::optional<std::error_code> result;
  start([&](std::error_code ec, auto&&...) { result = ec; });
  io.restart();
  io.run_until(deadline);
  if (result) return *result;
  std::error_code ignored;
  socket.cancel(ignored);
  io.restart();
  io.run();  // the cancelled handler runs: nothing refers to this frame afterwards
  return asio::error::timed_out;
}

}  // namespace

Attempt connect_to_peer(const TransportOptions& opt, int peer, const std::string& where,
                        Clock::time_point deadline, bool avoid_pacing, int lane,
                        const std::string& from) {
  Attempt a;
  const auto split = split_host_port(where);
  if (!split) {
    a.error = fmt::format("rank {} published an address that is not host:port: '{}'", peer, where);
    return a;
  }
  asio::io_context local;
  asio::ip::tcp::resolver resolver(local);
  std::error_code ec;
  const auto found = resolver.resolve(split->host, std::to_string(split->port),
                                      asio::ip::resolver_base::numeric_service, ec);
  if (ec || found.empty()) {
    a.error = fmt::format("cannot resolve rank {}'s address {}: {}", peer, where,
                          ec ? ec.message() : "no address");
    return a;
  }
  const asio::ip::tcp::endpoint endpoint = *found.begin();
  asio::ip::tcp::socket socket(local);
  if (socket.open(endpoint.protocol(), ec); ec) {
    a.error = fmt::format("cannot open a socket: {}", ec.message());
    return a;
  }
  set_close_on_exec(socket.native_handle());
  auto fail_with = [&](std::string text, ErrorKind kind = ErrorKind::Connection) {
    a.kind = kind;
    a.error = lane == 0 ? fmt::format("cannot connect to rank {} at {}: {}", peer, where, text)
                        : fmt::format("cannot open lane {} to rank {} at {}{}: {}", lane, peer,
                                      where, from.empty() ? "" : " from " + from, text);
    return std::move(a);
  };
  if (!from.empty()) {  // leave from that interface (a second NIC: lane_paths.hpp)
    const auto source = asio::ip::make_address(from, ec);
    if (!ec) socket.bind(asio::ip::tcp::endpoint(source, 0), ec);
    if (ec) return fail_with(fmt::format("cannot bind to {}: {}", from, ec.message()));
  }
  // Reads or writes `bytes` whole; "" or what went wrong.
  auto transfer = [&](bool read, std::uint8_t* bytes, std::size_t n, const char* late) {
    const auto e = run_until(local, socket, deadline, [&](auto handler) {
      if (read)
        asio::async_read(socket, asio::buffer(bytes, n), handler);
      else
        asio::async_write(socket, asio::buffer(bytes, n), handler);
    });
    if (!e) return std::string();
    if (e == asio::error::timed_out) return std::string(late);
    if (e == asio::error::eof)
      return std::string("the peer closed the connection during the handshake");
    return e.message();
  };

  ec = run_until(local, socket, deadline,
                 [&](auto handler) { socket.async_connect(endpoint, handler); });
  if (ec == asio::error::timed_out) return fail_with("no answer in time", ErrorKind::Timeout);
  if (ec) return fail_with(ec.message() + " (has it exited?)");
  tune(socket, avoid_pacing);

  std::array<std::uint8_t, wire::kChallengeBytes> challenge_bytes{};
  if (auto e = transfer(true, challenge_bytes.data(), challenge_bytes.size(),
                        "no handshake reply in time");
      !e.empty())
    return fail_with(e);
  if (!wire::has_magic(challenge_bytes.data()))
    return fail_with("the process listening there is not a collie peer");
  const auto challenge = wire::decode_challenge(challenge_bytes.data());
  if (challenge.version != wire::kProtocolVersion)
    return fail_with(fmt::format("it speaks peer protocol version {}, this rank speaks {}",
                                 challenge.version, wire::kProtocolVersion));
  if (challenge.rank != static_cast<std::uint32_t>(peer))
    return fail_with(fmt::format("the process listening there is rank {}", challenge.rank));

  const auto mode = seal::mode_of(opt.settings.seal);
  const bool seals = seal::seals_connection(mode, seal::same_host(socket.native_handle()));
  wire::Hello hello;
  hello.version = wire::kProtocolVersion;
  hello.sealing = seal::sealing_field(seals, mode, seals && opt.certificates != nullptr);
  hello.group_id = opt.group_id;
  hello.from = static_cast<std::uint32_t>(opt.rank);
  hello.to = static_cast<std::uint32_t>(peer);
  hello.world_size = static_cast<std::uint32_t>(opt.world_size);
  hello.lane = static_cast<std::uint16_t>(lane);
  // Both sides seal: an X25519 exchange keys the connection. Otherwise the
  // acceptor refuses it, naming both settings, or it stays clear.
  const bool both_seal = seals && seal::seals(challenge.sealing);
  std::optional<seal::KeyExchange> exchange;
  seal::Key shared{};
  if (both_seal) {
    exchange.emplace();
    hello.key = exchange->public_key();
    try {
      shared = exchange->shared(challenge.key);
    } catch (const Error& e) {
      return fail_with(fmt::format("its handshake is not valid: {}", e.what()),
                       ErrorKind::Protocol);
    }
  }
  std::array<std::uint8_t, wire::kHelloBytes> out{};
  wire::encode(hello, out.data());
  const auto keys = wire::handshake_keys(
      opt.token, challenge_bytes, std::span(out.data(), wire::kHelloProofAt),
      both_seal ? &shared : nullptr);
  hello.proof = keys.connector_proof;
  wire::encode(hello, out.data());
  if (auto e = transfer(false, out.data(), out.size(), "the handshake could not be sent in time");
      !e.empty())
    return fail_with(e);
  // Both prove themselves with certificates: this side's proof follows the
  // hello, over the challenge and the hello (its proof included).
  const bool certified = both_seal && opt.certificates != nullptr;
  const bool both_certified = certified && seal::certified(challenge.sealing);
  std::vector<std::uint8_t> transcript;
  if (both_certified) {
    const auto mine = opt.certificates->prove(wire::certificate_transcript(challenge_bytes, out));
    auto block = seal::framed_proof(mine);
    if (auto e = transfer(false, block.data(), block.size(),
                          "the handshake could not be sent in time");
        !e.empty())
      return fail_with(e);
    transcript = wire::certificate_transcript(challenge_bytes, out, mine);
  }

  std::array<std::uint8_t, wire::kVerdictBytes> verdict{};
  if (auto e = transfer(true, verdict.data(), verdict.size(), "no handshake reply in time");
      !e.empty())
    return fail_with(e);
  wire::Proof proof{};
  const bool proved = (verdict[1] & wire::kVerdictProof) != 0;
  if (proved) {
    if (auto e = transfer(true, proof.data(), proof.size(), "no handshake reply in time");
        !e.empty())
      return fail_with(e);
  }
  std::string reason(wire::get16(verdict.data() + 2), '\0');
  if (!reason.empty()) {
    if (auto e = transfer(true, reinterpret_cast<std::uint8_t*>(reason.data()), reason.size(),
                          "no handshake reply in time");
        !e.empty())
      return fail_with(e);
  }
  a.verdict = static_cast<wire::Verdict>(verdict[0]);
  if (a.verdict == wire::Verdict::Refused) return fail_with("it refused this rank: " + reason);
  if (a.verdict != wire::Verdict::Accepted && a.verdict != wire::Verdict::Duplicate)
    return fail_with("unknown handshake verdict");
  if (a.verdict == wire::Verdict::Accepted) {
    // The acceptor proves the job's secret too: a process between the two
    // (or one that took the peer's port) cannot accept in its name.
    if (!proved || !crypto::digests_equal(proof, keys.acceptor_proof))
      return fail_with(
          "its answer does not prove the job's secret: it holds another token "
          "(COLLIE_STORE_TOKEN differs), or the handshake was changed on its way",
          ErrorKind::Protocol);
    if (certified) {
      // This side proves itself with a certificate: so must the acceptor,
      // a certificate that names the host this side dialled.
      if (!both_certified || (verdict[1] & wire::kVerdictCertificate) == 0)
        return fail_with("it did not prove itself with a certificate, and this rank requires "
                         "one (COLLIE_SEAL_CERT is set here)",
                         ErrorKind::Protocol);
      std::array<std::uint8_t, seal::kProofLengthBytes> prefix{};
      if (auto e = transfer(true, prefix.data(), prefix.size(), "no handshake reply in time");
          !e.empty())
        return fail_with(e);
      const auto length = seal::proof_length(prefix);
      if (!length.problem.empty()) return fail_with(length.problem, ErrorKind::Protocol);
      std::vector<std::uint8_t> theirs(length.bytes);
      if (auto e = transfer(true, theirs.data(), theirs.size(), "no handshake reply in time");
          !e.empty())
        return fail_with(e);
      if (auto why = opt.certificates->check(theirs, transcript, split->host); !why.empty())
        return fail_with("its certificate proof fails: " + why, ErrorKind::Protocol);
    }
    if (both_seal)
      a.seal = std::make_unique<SealedState>(keys.connector_to_acceptor,
                                             keys.acceptor_to_connector);
  }
  a.connection = release(socket);  // the data path's, outside Asio (sockets.hpp)
  return a;
}

std::vector<Attempt> connect_lanes(const TransportOptions& options, int peer,
                                   std::vector<LanePath>& paths, Clock::time_point deadline,
                                   bool avoid_pacing, int first, int last, std::string& problem) {
  std::vector<Attempt> opened;
  for (int k = first; k <= last;) {
    const auto path = path_of_lane(k, paths.size());
    // Another NIC's path gets the handshake's time, not the whole timeout:
    // a dead NIC leaves its lanes to the pair's interface.
    const auto until =
        path == 0 ? deadline : std::min(deadline, Clock::now() + options.handshake_timeout);
    auto a = connect_to_peer(options, peer, paths[path].remote, until, avoid_pacing, k,
                             paths[path].local);
    if (a.error.empty() && a.verdict != wire::Verdict::Accepted)
      a.error = fmt::format("rank {} did not accept lane {}", peer, k);
    if (!a.error.empty() && path > 0) {
      collie::log().warn("rank {}: {}; its lanes to rank {} leave from the other interfaces",
                         options.rank, a.error, peer);
      paths.erase(paths.begin() + static_cast<std::ptrdiff_t>(path));
      continue;  // lane k again, over the paths left
    }
    if (!a.error.empty()) {
      problem = std::move(a.error);
      return {};
    }
    a.from = paths[path].local;
    opened.push_back(std::move(a));
    ++k;
  }
  return opened;
}

std::vector<LanePath> find_lane_paths(const TransportOptions& options,
                                      const std::string& published) {
  return lane_paths(split_published(published), options.listen_address, options.lane_addresses,
                    [](const std::string& host) {
                      try {
                        return route_source_address(host);
                      } catch (const Error&) {
                        return std::string();
                      }
                    });
}

void open_lanes(Connections& table, int peer,
                const std::function<std::string(Attempt&)>& find_address) {
  std::unique_lock lock(table.mu);
  auto& p = table.peer(peer);
  const int want = std::min<int>(table.streams.load(), wire::kMaxLanes);
  const int have = static_cast<int>(p.out_lanes.size());
  if (p.lanes == LanesState::Opening || p.lanes_final || p.state != PeerState::Ready ||
      have >= want)
    return;
  const auto before = p.lanes;
  p.lanes = LanesState::Opening;
  lock.unlock();
  const auto deadline = Clock::now() + table.opt.timeout;
  Attempt a;
  const auto where = find_address(a);
  std::string problem = a.error;
  std::vector<LanePath> paths;
  if (problem.empty()) {
    paths = find_lane_paths(table.opt, where);
    if (paths.empty()) problem = fmt::format("rank {} published no address", peer);
  }
  auto opened = problem.empty() ? connect_lanes(table.opt, peer, paths, deadline,
                                                table.avoid_pacing.load(std::memory_order_relaxed),
                                                have + 1, want, problem)
                                : std::vector<Attempt>{};
  lock.lock();
  if (p.state != PeerState::Ready) return;  // failed meanwhile: the lanes close
  if (!problem.empty()) {
    p.lanes = have > 0 ? before : LanesState::Unavailable;
    p.lanes_final = true;  // no more attempts
    collie::log().warn("rank {}: {}; its large messages to {} go on {}", table.opt.rank, problem,
                       table.describe_peer(peer),
                       have > 0 ? fmt::format("{} lanes", have) : "one connection");
    return;
  }
  for (std::size_t k = 0; k < opened.size(); ++k) {
    const int number = have + static_cast<int>(k) + 1;
    p.add_out_lane(number, std::move(opened[k].connection), std::move(opened[k].seal),
                   std::move(opened[k].from));
  }
  p.lanes = LanesState::Open;
  collie::log().debug("rank {}: {} lanes open to {} over {} path(s)", table.opt.rank,
                      p.out_lanes.size(), table.describe_peer(peer), paths.size());
}

}  // namespace collie::transport::tcp
