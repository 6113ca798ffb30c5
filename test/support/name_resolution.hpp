// Whether this machine resolves a host name. A minimal Debian (debootstrap
// --variant=minbase) has no /etc/hosts, so not even "localhost" resolves
// there: tests of name resolution check first, and say why they skip.
#pragma once

#include <netdb.h>
#include <string>

namespace collie::test {

inline bool resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ::freeaddrinfo(found);
  return true;
}

}  // namespace collie::test
