// Choosing the address a rank advertises.
#include "support/catch.hpp"

#include <collie/error.hpp>
#include <collie/transport/interfaces.hpp>

#include "support/name_resolution.hpp"

using collie::transport::InterfaceAddress;
using collie::transport::InterfaceFilter;

namespace {

const std::vector<InterfaceAddress> kHost = {
    {"lo", "127.0.0.1", false, true, false},     {"lo", "::1", true, true, false},
    {"eth0", "10.0.0.4", false, false, false},   {"eth0", "fe80::1", true, false, true},
    {"eth1", "10.1.0.4", false, false, false},   {"docker0", "172.17.0.1", false, false, false},
    {"ib0", "192.168.5.4", false, false, false}, {"ib0", "fd00::4", true, false, false},
};

}  // namespace

TEST_CASE("COLLIE_SOCKET_IFNAME specs parse like NCCL's", "[interfaces]") {
  auto f = InterfaceFilter::parse("eth");
  CHECK_FALSE(f.exclude);
  CHECK_FALSE(f.exact);
  CHECK(f.names == std::vector<std::string>{"eth"});
  CHECK(f.matches("eth0"));
  CHECK(f.matches("eth12"));
  CHECK_FALSE(f.matches("ib0"));

  f = InterfaceFilter::parse("=eth0");
  CHECK(f.exact);
  CHECK(f.matches("eth0"));
  CHECK_FALSE(f.matches("eth01"));

  f = InterfaceFilter::parse("^lo,docker");
  CHECK(f.exclude);
  CHECK(f.names == std::vector<std::string>{"lo", "docker"});
  CHECK_FALSE(f.matches("lo"));
  CHECK_FALSE(f.matches("docker0"));
  CHECK(f.matches("eth0"));

  for (const char* bad : {"", "^", "=", "eth0,", ",eth0", "eth0,,ib0"}) {
    INFO("spec '" << bad << "'");
    CHECK_THROWS_AS(InterfaceFilter::parse(bad), collie::Error);
  }
}

TEST_CASE("a spec picks the first listed interface, in the spec's order", "[interfaces]") {
  using collie::transport::choose_advertised_address;
  CHECK(choose_advertised_address("eth", "127.0.0.1", kHost) == "10.0.0.4");
  CHECK(choose_advertised_address("ib,eth", "127.0.0.1", kHost) == "192.168.5.4");
  CHECK(choose_advertised_address("=eth1", "127.0.0.1", kHost) == "10.1.0.4");
  CHECK(choose_advertised_address("^lo,eth,docker", "127.0.0.1", kHost) == "192.168.5.4");
  // Only link-local IPv6 on eth0 besides its IPv4: never the fe80 address.
  const std::vector<InterfaceAddress> v6_only = {{"eth0", "fe80::1", true, false, true},
                                                 {"ib0", "fd00::4", true, false, false}};
  CHECK(choose_advertised_address("^lo", "127.0.0.1", v6_only) == "fd00::4");
  CHECK_THROWS_WITH(choose_advertised_address("eth", "127.0.0.1", v6_only),
                    ContainsSubstring("matches no interface") && ContainsSubstring("ib0 fd00::4"));
  CHECK_THROWS_WITH(
      choose_advertised_address("wlan", "127.0.0.1", kHost),
      ContainsSubstring("COLLIE_SOCKET_IFNAME='wlan'") && ContainsSubstring("eth0 10.0.0.4"));
}

TEST_CASE("without a spec, the address is the one that routes to the master", "[interfaces]") {
  using collie::transport::choose_advertised_address;
  CHECK(choose_advertised_address("", "127.0.0.1", kHost) == "127.0.0.1");
  CHECK(collie::transport::route_source_address("127.0.0.5") == "127.0.0.1");
  if (collie::test::resolves("localhost")) {
    const auto via_localhost = collie::transport::route_source_address("localhost");
    CHECK((via_localhost.rfind("127.", 0) == 0 || via_localhost == "::1"));
  } else {
    WARN("'localhost' does not resolve on this machine (no /etc/hosts): not checked");
  }
  CHECK_THROWS_WITH(collie::transport::route_source_address("no-such-host.invalid"),
                    ContainsSubstring("cannot resolve the master 'no-such-host.invalid'"));
}

TEST_CASE("this host's interfaces include loopback", "[interfaces]") {
  const auto interfaces = collie::transport::list_interfaces();
  bool loopback = false;
  for (const auto& i : interfaces) {
    CHECK_FALSE(i.name.empty());
    CHECK_FALSE(i.address.empty());
    loopback = loopback || (i.is_loopback && i.address == "127.0.0.1");
  }
  CHECK(loopback);
}

TEST_CASE("advertising loopback to a job whose master is on another host is an error",
          "[interfaces]") {
  using collie::transport::choose_advertised_address;
  // The master 10.9.9.9 is no address of this (made-up) host.
  CHECK_THROWS_WITH(choose_advertised_address("lo", "10.9.9.9", kHost),
                    ContainsSubstring("COLLIE_SOCKET_IFNAME='lo' makes this rank advertise "
                                    "127.0.0.1 on 'lo', a loopback address") &&
                        ContainsSubstring("the job's master 10.9.9.9 is on another host"));
  // A master on this host (loopback, or one of its addresses): loopback is fine.
  CHECK(choose_advertised_address("lo", "127.0.0.1", kHost) == "127.0.0.1");
  CHECK(choose_advertised_address("lo", "10.0.0.4", kHost) == "127.0.0.1");
  // A master that does not resolve: no guess is made an error.
  CHECK(choose_advertised_address("lo", "no-such-host.invalid", kHost) == "127.0.0.1");
  // Another interface is fine whatever the master.
  CHECK(choose_advertised_address("eth0", "10.9.9.9", kHost) == "10.0.0.4");
}
