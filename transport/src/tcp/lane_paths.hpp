// Which interfaces a pair's lanes leave from and reach (interfaces.hpp,
// COLLIE_LANE_IFNAME): path 0 is the pair's own (the peer's advertised
// address, the kernel's choice of source); each further path pairs a lane
// address the peer published with this rank's own interface that the
// kernel routes it from, so that a host with two NICs on two networks
// sends on both. A lane k takes path (k - 1) mod the paths' count: with 4
// lanes and two NICs, two leave from each.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace collie::transport::tcp {

struct LanePath {
  std::string local;   // the source address to bind; "": as the kernel routes
  std::string remote;  // "host:port"
};

// The local address the kernel would send to `host` from; "" when none
// (route_source_address(), interfaces.hpp, in the transport).
using RouteSource = std::function<std::string(const std::string& host)>;

// The paths to a peer that published `published` (split_published()),
// from a rank whose advertised address is `primary` and whose lane
// addresses are `mine`. A peer's lane address is left out where it is one
// of this rank's own addresses (a private network each host has alike),
// where the kernel would reach it from the primary's interface or from an
// address not in `mine` (no second NIC to it), or from a source another
// path already has.
std::vector<LanePath> lane_paths(const std::vector<std::string>& published,
                                 const std::string& primary, const std::vector<std::string>& mine,
                                 const RouteSource& route);

// The path lane `lane` (1, 2, ...) takes among `paths` (at least one).
inline std::size_t path_of_lane(int lane, std::size_t paths) {
  return static_cast<std::size_t>(lane - 1) % paths;
}

}  // namespace collie::transport::tcp
