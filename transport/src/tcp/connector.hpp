// The connecting side: reach a peer at its published address and run the
// handshake, all before a deadline.
//
// It resolves "host:port", connects, reads the peer's challenge (checking
// it is a collie peer of this version and the rank it wanted), answers with
// the hello and its proof (and its X25519 public key, where the connection
// is sealed), and reads the verdict and the acceptor's proof. Each step is an
// asynchronous Asio operation on a private io_context run until the
// deadline, so a peer that accepts and then says nothing cannot hold the
// caller past it. Runs on the caller's thread, without the table's lock.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <collie/transport/transport.hpp>

#include "lane_paths.hpp"
#include "request.hpp"
#include "sealed_stream.hpp"
#include "sockets.hpp"
#include "wire.hpp"

namespace collie::transport::tcp {

struct Attempt {
  Descriptor connection;  // tuned; valid when the handshake completed
  std::unique_ptr<SealedState> seal;  // its records' keys, when both sides seal it
  wire::Verdict verdict = wire::Verdict::Refused;
  std::string error;  // empty: the handshake completed with `verdict`
  ErrorKind kind = ErrorKind::Connection;
  std::string from;  // a lane's source address, where it was bound to one (lane_paths.hpp)
};

// Connects to rank `peer`, which listens at `where` ("host:port");
// `avoid_pacing`: as tune()'s (sockets.hpp); `lane`: 0 for the pair's
// connection, k > 0 for this rank's sending lane k (lanes.hpp); `from`:
// the local address to leave from ("": as the kernel routes).
Attempt connect_to_peer(const TransportOptions& options, int peer, const std::string& where,
                        std::chrono::steady_clock::time_point deadline, bool avoid_pacing,
                        int lane = 0, const std::string& from = {});
// Opens this rank's sending lanes first..last to `peer` (lanes.hpp), one
// after another, lane k over path_of_lane(k) of `paths` (lane_paths.hpp):
// all of them, or none and `problem` says why. A path past the first that
// fails within the handshake's timeout is left out of `paths`, with a
// warning, and the lanes open again over those left.
std::vector<Attempt> connect_lanes(const TransportOptions& options, int peer,
                                   std::vector<LanePath>& paths,
                                   std::chrono::steady_clock::time_point deadline,
                                   bool avoid_pacing, int first, int last, std::string& problem);

// The paths to a peer that published `published` (lane_paths()), routed
// by this host's kernel.
std::vector<LanePath> find_lane_paths(const TransportOptions& options,
                                      const std::string& published);

class Connections;
// Opens this rank's sending lanes to a Ready peer, up to the table's
// `streams` (more, later, when set_streams() asks for more), at what it
// published as find_address() gives it ("" and the Attempt's error when it
// cannot), over the paths lane_paths() finds to it: the
// caller's thread, without the table's lock, as the pair's connection is
// opened. Lanes that cannot be opened leave the pair with those it has (its
// connection alone at first), with a warning, and no more attempts.
void open_lanes(Connections& table, int peer,
                const std::function<std::string(Attempt&)>& find_address);

}  // namespace collie::transport::tcp
