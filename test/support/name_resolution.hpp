// This machine's names and addresses, for tests that need them. A minimal
// Debian (debootstrap --variant=minbase) has no /etc/hosts, so not even
// "localhost" resolves there, and a container may have loopback alone:
// such tests check first, and say why they skip.
#pragma once

#include <netdb.h>
#include <string>

#include <collie/transport/interfaces.hpp>

namespace collie::test {

inline bool resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ::freeaddrinfo(found);
  return true;
}

// A non-loopback IPv4 address of this machine (the last listed), or "" if
// it has none.
inline std::string non_loopback_ipv4() {
  std::string found;
  for (const auto& i : collie::transport::list_interfaces())
    if (!i.is_v6 && !i.is_loopback) found = i.address;
  return found;
}

}  // namespace collie::test
