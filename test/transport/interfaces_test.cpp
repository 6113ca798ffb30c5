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

TEST_CASE("COLLIE_LANE_IFNAME: a host's other interfaces for lanes, or none", "[interfaces]") {
  using collie::transport::choose_lane_addresses;
  using Addresses = std::vector<std::string>;
  // auto: every other address of the primary's family, neither loopback
  // nor link-local (docker0's too: a peer whose kernel does not route to it
  // from a second NIC never uses it, lane_paths.hpp).
  CHECK(choose_lane_addresses("auto", "10.0.0.4", kHost) ==
        Addresses{"10.1.0.4", "172.17.0.1", "192.168.5.4"});
  CHECK(choose_lane_addresses("", "10.0.0.4", kHost) ==
        choose_lane_addresses("auto", "10.0.0.4", kHost));
  CHECK(choose_lane_addresses("auto", "fd00::4", kHost).empty());  // no other IPv6 but link-local
  CHECK(choose_lane_addresses("none", "10.0.0.4", kHost).empty());
  // A list: those interfaces only, the primary left out.
  CHECK(choose_lane_addresses("eth", "10.0.0.4", kHost) == Addresses{"10.1.0.4"});
  CHECK(choose_lane_addresses("^docker,lo", "10.0.0.4", kHost) ==
        Addresses{"10.1.0.4", "192.168.5.4"});
  CHECK(choose_lane_addresses("=eth0", "10.0.0.4", kHost).empty());
  // Every rank on one host (the primary on loopback): none.
  CHECK(choose_lane_addresses("auto", "127.0.0.1", kHost).empty());
  CHECK(choose_lane_addresses("eth1", "127.0.0.1", kHost).empty());
  // A list that names no interface, or is malformed, names the variable.
  CHECK_THROWS_WITH(choose_lane_addresses("wlan", "10.0.0.4", kHost),
                    ContainsSubstring("COLLIE_LANE_IFNAME='wlan' matches no interface") &&
                        ContainsSubstring("eth1 10.1.0.4"));
  CHECK_THROWS_WITH(choose_lane_addresses("eth0,", "10.0.0.4", kHost),
                    ContainsSubstring("COLLIE_LANE_IFNAME must name interfaces"));
}

TEST_CASE("a rank's published addresses: the advertised one first, then its lanes'",
          "[interfaces]") {
  using collie::transport::join_published;
  using collie::transport::published_primary;
  using collie::transport::split_published;
  using Addresses = std::vector<std::string>;
  const Addresses three{"10.0.0.4:4100", "10.1.0.4:4101", "[fd00::4]:4102"};
  CHECK(join_published(three) == "10.0.0.4:4100,10.1.0.4:4101,[fd00::4]:4102");
  CHECK(split_published(join_published(three)) == three);
  CHECK(published_primary(join_published(three)) == "10.0.0.4:4100");
  CHECK(join_published({"10.0.0.4:4100"}) == "10.0.0.4:4100");  // one: as before lanes had NICs
  CHECK(split_published("10.0.0.4:4100") == Addresses{"10.0.0.4:4100"});
  CHECK(published_primary("10.0.0.4:4100") == "10.0.0.4:4100");
  CHECK(split_published("").empty());
  CHECK(published_primary("").empty());
}
