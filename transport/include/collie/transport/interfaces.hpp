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

  // Throws collie::Error on an empty or malformed spec.
  static InterfaceFilter parse(std::string_view spec);
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

}  // namespace collie::transport
