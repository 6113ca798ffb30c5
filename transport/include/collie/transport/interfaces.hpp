// Which address a rank listens on and tells its peers.
//
// By default: the local address of the interface that routes to the master
// (found by asking the kernel for a route, no packet sent), so a rank never
// advertises 127.0.0.1 to peers on other hosts unless the master itself is
// on loopback. COLLIE_SOCKET_IFNAME overrides it, as NCCL_SOCKET_IFNAME does:
//   eth0          interfaces whose name starts with "eth0"
//   eth,ib        starts with "eth" or "ib" (the order is the preference)
//   =eth0         exactly "eth0"
//   ^lo,docker    any interface except those starting with "lo" or "docker"
//
// A host's other interfaces may carry a pair's lanes (the extra connections
// of its large messages, transport/src/tcp/lanes.hpp): COLLIE_LANE_IFNAME
// says which (choose_lane_addresses()); a rank listens on each and
// publishes them after its advertised address.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace collie::transport {

struct InterfaceAddress {
  std::string name;     // "eth0"
  std::string address;  // "10.0.0.4", "fd00::4"
  bool is_v6 = false;
  bool is_loopback = false;
  bool is_link_local = false;  // IPv6 fe80::/10: unusable without a scope
};

// A parsed COLLIE_SOCKET_IFNAME.
struct InterfaceFilter {
  bool exclude = false;  // '^'
  bool exact = false;    // '='
  std::vector<std::string> names;

  // Throws collie::Error on an empty or malformed spec, naming `variable`.
  static InterfaceFilter parse(std::string_view spec,
                               std::string_view variable = "COLLIE_SOCKET_IFNAME");
  bool matches(std::string_view interface_name) const;
  // Whether `interface_name` is what the listed `entry` names (prefix, or
  // exact with '='), before any '^' exclusion.
  bool selects(std::string_view interface_name, std::string_view entry) const;
};

// The up interfaces of this host with an IPv4 or IPv6 address (getifaddrs).
std::vector<InterfaceAddress> list_interfaces();

// The local address the kernel would use to reach `host` (an IPv4 or IPv6
// literal or a name). Throws collie::Error if there is no route.
std::string route_source_address(const std::string& host);

// The address to listen on and advertise: from `ifname_spec` when it is not
// empty, else the one that routes to `master_host`. `interfaces` is normally
// list_interfaces(). Throws collie::Error naming the spec and the
// interfaces there are when nothing matches, and naming the interface and
// the master when the spec picks a loopback address while the master is on
// another host (no rank there could connect).
std::string choose_advertised_address(const std::string& ifname_spec,
                                      const std::string& master_host,
                                      const std::vector<InterfaceAddress>& interfaces);

// The addresses besides `primary` (the advertised one) that a rank's lanes
// may leave from, as COLLIE_LANE_IFNAME's `spec` says: "" or "auto", every
// up interface's address of the primary's family that is neither loopback
// nor link-local; "none", none; else those of the interfaces it names (as
// COLLIE_SOCKET_IFNAME does). None while the primary is a loopback address
// (every rank on one host). Throws collie::Error naming the variable and
// the interfaces there are when a named list matches none.
std::vector<std::string> choose_lane_addresses(const std::string& spec, const std::string& primary,
                                               const std::vector<InterfaceAddress>& interfaces);

// What a rank publishes in the store: where it listens, "host:port", then
// ",host:port" for each lane address it listens on too. `published_primary`
// is the first (what a pair's own connection reaches and messages name).
std::string join_published(const std::vector<std::string>& listening);
std::vector<std::string> split_published(std::string_view published);
std::string published_primary(std::string_view published);

}  // namespace collie::transport
