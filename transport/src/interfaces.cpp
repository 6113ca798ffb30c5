// Which address a rank advertises: the interfaces, and the one that routes
// to the master or COLLIE_SOCKET_IFNAME names (interfaces.hpp).
#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <ifaddrs.h>
#include <memory>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>

#include <collie/error.hpp>
#include <collie/transport/interfaces.hpp>

namespace collie::transport {

namespace {

std::string address_text(const sockaddr* sa) {
  char text[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, text, sizeof(text));
  } else {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, text, sizeof(text));
  }
  return text;
}

std::string describe(const std::vector<InterfaceAddress>& interfaces) {
  std::string out;
  for (const auto& i : interfaces) {
    out += fmt::format("{}{} {}", out.empty() ? "" : ", ", i.name, i.address);
  }
  return out.empty() ? "none" : out;
}

// The addresses `host` resolves to (none if it does not resolve).
std::vector<std::string> resolve_all(const std::string& host) {
  std::vector<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return out;
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(found, &::freeaddrinfo);
  for (auto* a = found; a != nullptr; a = a->ai_next)
    out.push_back(address_text(a->ai_addr));
  return out;
}

// Whether `host` is this host: a loopback name or address, or one of its
// interfaces' addresses. Unknown (it does not resolve): true, so that no
// error is made of a guess.
bool is_this_host(const std::string& host, const std::vector<InterfaceAddress>& interfaces) {
  const auto addresses = resolve_all(host);
  if (addresses.empty()) return true;
  for (const auto& a : addresses) {
    if (a.rfind("127.", 0) == 0 || a == "::1") return true;
    for (const auto& i : interfaces)
      if (i.address == a) return true;
  }
  return false;
}

}  // namespace

InterfaceFilter InterfaceFilter::parse(std::string_view spec, std::string_view variable) {
  InterfaceFilter filter;
  if (spec.starts_with('^')) {
    filter.exclude = true;
    spec.remove_prefix(1);
  } else if (spec.starts_with('=')) {
    filter.exact = true;
    spec.remove_prefix(1);
  }
  // Split on ','; an empty name anywhere ("eth0,,ib", "eth0,") is a mistake.
  bool empty_name = spec.empty();
  for (std::size_t start = 0; start <= spec.size();) {
    const auto comma = std::min(spec.find(',', start), spec.size());
    const auto name = spec.substr(start, comma - start);
    empty_name = empty_name || name.empty();
    filter.names.emplace_back(name);
    start = comma + 1;
  }
  if (empty_name) filter.names.clear();
  if (filter.names.empty()) {
    throw Error(fmt::format(
        "{} must name interfaces: 'eth0', 'eth,ib', '=eth0' (exact) or '^lo,docker' (all but "
        "these)",
        variable));
  }
  return filter;
}

bool InterfaceFilter::selects(std::string_view interface_name, std::string_view entry) const {
  return exact ? interface_name == entry : interface_name.starts_with(entry);
}

bool InterfaceFilter::matches(std::string_view interface_name) const {
  const bool listed = std::any_of(names.begin(), names.end(), [&](const std::string& entry) {
    return selects(interface_name, entry);
  });
  return exclude ? !listed : listed;
}

std::vector<InterfaceAddress> list_interfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw Error(fmt::format("cannot list network interfaces: {}", std::strerror(errno)));
  }
  std::unique_ptr<ifaddrs, decltype(&freeifaddrs)> owner(list, freeifaddrs);
  std::vector<InterfaceAddress> out;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    InterfaceAddress a;
    a.name = i->ifa_name;
    a.address = address_text(i->ifa_addr);
    a.is_v6 = family == AF_INET6;
    a.is_loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    a.is_link_local =
        a.is_v6 &&
        IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr);
    out.push_back(std::move(a));
  }
  return out;
}

std::string route_source_address(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), "9", &hints, &found); rc != 0) {
    throw Error(fmt::format("cannot resolve the master '{}': {}", host, gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owner(found, freeaddrinfo);
  std::string errors;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    // Connecting a UDP socket sends nothing; it only picks a route.
    const int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof(local);
    const bool ok = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                    getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!ok) errors += fmt::format("{}{}", errors.empty() ? "" : "; ", std::strerror(errno));
    close(fd);
    if (ok) return address_text(reinterpret_cast<const sockaddr*>(&local));
  }
  throw Error(fmt::format("no route to the master '{}' ({})", host, errors));
}

std::string choose_advertised_address(const std::string& ifname_spec,
                                      const std::string& master_host,
                                      const std::vector<InterfaceAddress>& interfaces) {
  if (ifname_spec.empty()) return route_source_address(master_host);
  const auto filter = InterfaceFilter::parse(ifname_spec);
  // Prefer the master's address family, and never a link-local IPv6 address.
  bool master_v6 = false;
  try {
    master_v6 = route_source_address(master_host).find(':') != std::string::npos;
  } catch (const Error&) {
  }
  const InterfaceAddress* best = nullptr;
  auto consider = [&](bool want_v6) {
    if (!filter.exclude) {
      for (const auto& name : filter.names) {  // the spec's order is the preference
        for (const auto& i : interfaces) {
          if (filter.selects(i.name, name) && i.is_v6 == want_v6 && !i.is_link_local) return &i;
        }
      }
      return static_cast<const InterfaceAddress*>(nullptr);
    }
    for (const auto& i : interfaces) {
      if (filter.matches(i.name) && i.is_v6 == want_v6 && !i.is_link_local) return &i;
    }
    return static_cast<const InterfaceAddress*>(nullptr);
  };
  best = consider(master_v6);
  if (best == nullptr) best = consider(!master_v6);
  if (best == nullptr) {
    throw Error(
        fmt::format("COLLIE_SOCKET_IFNAME='{}' matches no interface with a usable "
                    "address; this host has: {}",
                    ifname_spec, describe(interfaces)));
  }
  // A loopback address reaches nobody on another host: with the master
  // there, the job's other hosts could never connect to this rank.
  if (best->is_loopback && !master_host.empty() && !is_this_host(master_host, interfaces)) {
    std::string reaching;
    try {
      const auto source = route_source_address(master_host);
      for (const auto& i : interfaces)
        if (i.address == source) reaching = fmt::format(" (here, '{}' reaches it)", i.name);
    } catch (const Error&) {
    }
    throw Error(fmt::format(
        "COLLIE_SOCKET_IFNAME='{}' makes this rank advertise {} on '{}', a loopback address, but "
        "the job's master {} is on another host: ranks there could not reach this one. Choose an "
        "interface that reaches the master{}, or unset COLLIE_SOCKET_IFNAME",
        ifname_spec, best->address, best->name, master_host, reaching));
  }
  return best->address;
}

std::vector<std::string> choose_lane_addresses(const std::string& spec, const std::string& primary,
                                               const std::vector<InterfaceAddress>& interfaces) {
  if (spec == "none") return {};
  const bool automatic = spec.empty() || spec == "auto";
  const auto filter =
      automatic ? InterfaceFilter{} : InterfaceFilter::parse(spec, "COLLIE_LANE_IFNAME");
  const bool primary_v6 = primary.find(':') != std::string::npos;
  bool primary_loopback = primary.rfind("127.", 0) == 0 || primary == "::1";
  for (const auto& i : interfaces)
    if (i.address == primary && i.is_loopback) primary_loopback = true;
  std::vector<std::string> out;
  bool named_any = false;
  for (const auto& i : interfaces) {
    if (!automatic && !filter.matches(i.name)) continue;
    named_any = true;
    if (i.is_v6 != primary_v6 || i.is_loopback || i.is_link_local || i.address == primary ||
        std::find(out.begin(), out.end(), i.address) != out.end())
      continue;
    out.push_back(i.address);
  }
  if (!automatic && !named_any) {
    throw Error(fmt::format("COLLIE_LANE_IFNAME='{}' matches no interface; this host has: {}", spec,
                            describe(interfaces)));
  }
  if (primary_loopback) return {};
  return out;
}

std::string join_published(const std::vector<std::string>& listening) {
  std::string out;
  for (const auto& a : listening)
    out += (out.empty() ? "" : ",") + a;
  return out;
}

std::vector<std::string> split_published(std::string_view published) {
  std::vector<std::string> out;
  for (std::size_t start = 0; start < published.size();) {
    const auto comma = std::min(published.find(',', start), published.size());
    if (comma > start) out.emplace_back(published.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::string published_primary(std::string_view published) {
  return std::string(published.substr(0, std::min(published.find(','), published.size())));
}

}  // namespace collie::transport
